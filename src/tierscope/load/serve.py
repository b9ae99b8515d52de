"""Run the test server as its own process: ``python -m tierscope.load.serve --port P --delay-ms D``.

It prints its base URL on one line, then serves until SIGTERM or Ctrl-C (benchmarks use it
to keep the server's CPU and memory out of the measured process).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from tierscope.load.testing import TestServer


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted (for benchmarks that need the server in its own process)."""
    p = argparse.ArgumentParser(prog="python -m tierscope.load.serve", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=0.0, help="fixed response delay")
    p.add_argument("--body-bytes", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    server = TestServer(
        args.delay_ms / 1000.0,
        host=args.host,
        port=args.port,
        body_bytes=args.body_bytes,
        threads=args.threads,
    )
    print(server.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with contextlib.suppress(KeyboardInterrupt):
        done.wait()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
