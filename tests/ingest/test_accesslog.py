"""``tierscope import access-log``: a real nginx (Debian's package), started by the test on
loopback with a timed log format, proxies to an upstream the test runs (which notes how long
it held each request) and answers some paths itself; the import must find every request, its
status, its upstream visit and times that hold the upstream's own.
Apache's format is read from lines written to its documented directives (%t %r %>s %D)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.experiment._support import require
from tierscope import ingest
from tierscope.errors import InputError
from tierscope.experiment.targets.webstack import NGINX, nginx_user
from tierscope.ingest.accesslog import compile_format
from tierscope.store import read_run

NGINX_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $msec $request_time $upstream_response_time'
)
HOLD_S = 0.03
CONF = """
worker_processes 1;
{user}
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    log_format timed '{fmt}';
    access_log {dir}/access.log timed;
    server {{
        listen 127.0.0.1:{port};
        location /api/ {{ proxy_pass http://127.0.0.1:{upstream}; }}
        location = /ping {{ return 200 "pong"; }}
        location = /down {{ return 503; }}
    }}
}}
"""


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[float]]]:
    held: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            a = time.monotonic()
            time.sleep(HOLD_S)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            held.append(time.monotonic() - a)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield int(httpd.server_address[1]), held
    finally:
        httpd.shutdown()
        httpd.server_close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.real_system
@pytest.mark.timeout(120)
def test_a_real_nginx_log_imports_with_its_upstream_visits(
    upstream: tuple[int, list[float]], tmp_path: Path
) -> None:
    if not os.access(NGINX, os.X_OK):
        require("nginx", "apt-get install -y nginx-light")
    port_up, held = upstream
    port = _free_port()
    run_dir = tmp_path / "nginx"
    (run_dir / "tmp").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(run_dir, 0o777)
    conf = run_dir / "nginx.conf"
    conf.write_text(CONF.format(user=nginx_user(), dir=run_dir, fmt=NGINX_FORMAT, port=port,
                                upstream=port_up))  # fmt: skip
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-g", "daemon off;"],
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{base}/ping", timeout=2) as answer:
                    answer.read()
                break
            except OSError:
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.1)
        sent = {"/api/items?id=3": 12, "/ping": 6, "/down": 4}
        for path, n in sent.items():
            for _ in range(n):
                try:
                    with urllib.request.urlopen(base + path, timeout=5) as answer:
                        answer.read()
                except urllib.error.HTTPError as exc:
                    exc.close()
                    assert exc.code == 503
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    log = run_dir / "access.log"
    run = read_run(
        ingest.import_files("access-log", tmp_path / "run", [log], log_format=NGINX_FORMAT)[0]
    )
    req = run.requests
    assert req is not None
    front = req.filter(pl.col("tier") == "nginx")
    assert front.height == 1 + sum(sent.values())  # and the first /ping that found it up
    names = front.group_by("interaction").len()
    assert dict(names.iter_rows()) == {"GET /api/items": 12, "GET /ping": 7, "GET /down": 4}
    assert front.filter(pl.col("status") == "error")["interaction"].to_list() == ["GET /down"] * 4
    up = req.filter(pl.col("tier") == "upstream")
    assert up.height == len(held) == 12
    # nginx's times have millisecond resolution; the upstream held each request HOLD_S or more
    up_rt = (up["end"] - up["start"]).to_list()
    assert min(up_rt) >= HOLD_S - 0.002
    joined = up.join(front, left_on="parent", right_on="visit", suffix="_f")
    assert joined.height == 12
    # each upstream visit lies inside the request it served (nginx's two times are rounded to
    # the millisecond on their own, so the upstream's can pass the request's by one)
    assert (joined["start"] >= joined["start_f"] - 1e-6).all()
    assert (joined["end"] <= joined["end_f"] + 1e-6).all()
    assert run.graph.edges() == [("nginx", "upstream")]
    assert req.filter(pl.col("tier") == "client").height == front.height


APACHE_FORMAT = '%h %l %u %t "%r" %>s %b %D'


def test_apache_lines_read_with_their_directives(tmp_path: Path) -> None:
    log = tmp_path / "access_log"
    log.write_text(
        '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 '
        "1500\n"
        '127.0.0.1 - - [10/Oct/2000:13:55:37 -0700] "POST /cart?x=1 HTTP/1.1" 500 12 250000\n'
    )
    run = read_run(
        ingest.import_files("access-log", tmp_path / "run", [log], log_format=APACHE_FORMAT)[0]
    )
    req = run.requests
    assert req is not None
    front = req.filter(pl.col("tier") == "apache").sort("start")
    # %t is when the request came; %D its time in microseconds
    assert front["start"].to_list() == [0.0, 1.0]
    assert (front["end"] - front["start"]).to_list() == pytest.approx([0.0015, 0.25], abs=1e-6)
    assert front["status"].to_list() == ["ok", "error"]
    assert front["interaction"].to_list() == ["GET /apache_pb.gif", "POST /cart"]
    assert run.spec.time_origin == "2000-10-10T20:55:36+00:00"  # type: ignore[union-attr]
    # %{msec}t: the arrival in epoch milliseconds
    log.write_text('1.2.3.4 971211336500 "GET /x HTTP/1.1" 200 1500\n')
    again = read_run(ingest.import_files("access-log", tmp_path / "run2", [log],
                                         log_format='%h %{msec}t "%r" %>s %D')[0])  # fmt: skip
    assert again.spec.time_origin == "2000-10-10T20:55:36.500000+00:00"  # type: ignore[union-attr]


def test_formats_compile_to_what_they_name() -> None:
    _, names, style = compile_format(NGINX_FORMAT)
    assert style == "nginx" and "request_time" in names and "time_local" in names
    _, names, style = compile_format(APACHE_FORMAT)
    assert style == "apache" and names[3] == "time_apache" and "duration_us" in names
    with pytest.raises(InputError):
        compile_format("no variables at all")


_HEAD = '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" '


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (_HEAD + '200 1 "-" "-" 1.0 x -', "request_time"),
        (_HEAD + '2x0 1 "-" "-" 1.0 0.1 -', "status"),
        (_HEAD + '200 1 "-" "-" soon 0.1 -', "msec"),  # $msec is read before $time_local
        ("garbage", "line"),
        (_HEAD + '200 1 "-" "-" 1.0 0.1 0.1, z', "upstream_response_time"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, line: str, field: str) -> None:
    log = tmp_path / "access.log"
    good = '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1 "-" "-" 1.0 0.1 -'
    log.write_text(good + "\n" + line + "\n")
    with pytest.raises(InputError) as err:
        ingest.import_files("access-log", tmp_path / "run", [log], log_format=NGINX_FORMAT)
    assert err.value.field == field and "access.log, line 2" in str(err.value)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=300))
def test_fuzzed_logs_give_input_errors_only(tmp_path: Path, text: str) -> None:
    log = tmp_path / "fuzz.log"
    log.write_text(text)
    try:
        ingest.import_files("access-log", tmp_path / "run", [log], log_format=NGINX_FORMAT,
                            force=True)  # fmt: skip
    except InputError as exc:
        assert "fuzz.log" in str(exc)
