"""A loopback HTTP server for the load tools' tests: it answers every GET after ``service_s``
and notes when each request came, the truth the imported throughput is checked against."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def counting_server(service_s: float) -> Iterator[tuple[int, list[float]]]:
    """(port, arrival times in epoch seconds) of a server that runs while the block does."""
    arrivals: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            arrivals.append(time.time())
            time.sleep(service_s)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield int(httpd.server_address[1]), arrivals
    finally:
        httpd.shutdown()
        httpd.server_close()
