"""``tierscope import prometheus --url``: a real Prometheus server (Debian's package), started
by the test on loopback, scraping itself and a small exporter the test runs; the import asks it
for a range and finds the exporter's gauge exactly and the server's own memory and CPU."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.experiment._support import require
from tierscope.cli import main
from tierscope.store import read_run

pytestmark = [pytest.mark.real_system, pytest.mark.timeout(180)]

#: What the exporter serves: a gauge the import must find unchanged.
QUEUE = 7.0
EXPOSITION = (
    "# HELP demo_queue_length Requests waiting.\n# TYPE demo_queue_length gauge\n"
    f"demo_queue_length {QUEUE:g}\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Exporter(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _wait_for_scrapes(url: str, n: int, timeout_s: float = 90.0) -> None:
    """Until both jobs were scraped ``n`` times (the server scrapes every second)."""
    query = urllib.parse.urlencode({"query": f"count(count_over_time(up[60s]) >= {n})"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as answer:
            result = json.loads(answer.read())["data"]["result"]
        if result and float(result[0]["value"][1]) == 2:  # both jobs
            return
        time.sleep(0.5)
    pytest.fail(f"prometheus did not scrape both jobs {n} times in {timeout_s:g} s")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        require("the Prometheus server", "apt-get install -y prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    port = _free_port()
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: prometheus\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
        "  - job_name: demo\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter.server_address[1]}']}}]\n"
    )
    log = (work / "log").open("w")
    proc = subprocess.Popen(
        [str(binary), f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log, cwd=work,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("prometheus not ready in 60 s: " + (work / "log").read_text()[-2000:])
        _wait_for_scrapes(url, 8)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        exporter.shutdown()
        exporter.server_close()


def test_a_range_asked_of_a_real_server(prometheus: str, tmp_path: Path) -> None:
    queries = tmp_path / "q.yaml"
    queries.write_text(
        "queue_length: demo_queue_length\n"
        "mem: process_resident_memory_bytes{job='prometheus'}\n"
        "cpu_cores: rate(process_cpu_seconds_total{job='prometheus'}[5s])\n"
    )
    end = time.time()
    args = ["import", "prometheus", "--url", prometheus, "--query-file", str(queries),
            "--start", f"{end - 6:.3f}", "--end", f"{end:.3f}", "--step", "1",
            "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(args) == 0
    m = read_run(tmp_path / "run").metrics
    assert m is not None and set(m["tier"]) == {"demo", "prometheus"}
    queue = m.filter(pl.col("tier") == "demo", pl.col("metric") == "queue_length")
    assert queue.height >= 5 and (queue["value"] == QUEUE).all()
    assert sorted(queue["t"].to_list()) == pytest.approx(list(range(queue.height)))  # 1 s steps
    mem = m.filter(pl.col("tier") == "prometheus", pl.col("metric") == "mem_bytes")["value"]
    assert mem.len() >= 5 and 10 * 2**20 < float(mem.min()) < 4 * 2**30  # type: ignore[arg-type]
    cpu = m.filter(pl.col("tier") == "prometheus", pl.col("metric") == "cpu_cores")["value"]
    assert cpu.len() >= 3 and float(cpu.min()) >= 0 and float(cpu.max()) < 2  # type: ignore[arg-type]


def test_a_query_the_server_refuses_and_a_server_that_is_not_there(
    prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "q.yaml"
    bad.write_text("cpu: 'rate(('\n")
    end = time.time()
    span = ["--start", f"{end - 5:.3f}", "--end", f"{end:.3f}", "--step", "1"]
    assert main(["import", "prometheus", "--url", prometheus, "--query-file", str(bad), *span,
                 "--out", str(tmp_path / "a")]) == 2  # fmt: skip
    assert "a query the server takes (400" in capsys.readouterr().err
    assert main(["import", "prometheus", "--url", f"http://127.0.0.1:{_free_port()}",
                 "--query-file", str(bad), *span, "--out", str(tmp_path / "b")]) == 2  # fmt: skip
    assert "a Prometheus server that answers" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
