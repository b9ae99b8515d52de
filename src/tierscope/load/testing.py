"""An HTTP/1.1 server with known, controllable latency, for testing and calibrating clients.

It runs on native threads in the calling process (``TestServer``) or as its own process
(``python -m tierscope.load.serve --port 18123 --delay-ms 5``). Each response waits a delay
drawn from ``delay`` (a distribution in the model format, e.g. ``{"dist": "exp", "mean": 0.01}``,
or a number of seconds), overridden per request by the query parameter ``delay_ms``; ``stall(s)``
freezes all responses for ``s`` seconds. Further query parameters: ``size`` (body bytes),
``status``, ``close=1``, ``chunked=1``, ``abort=1`` (close without answering). With
``record=True`` the server logs every request's ``X-Request-Id`` with its arrival and departure
time (CLOCK_MONOTONIC seconds): the ground truth the load generator's own measurements are
checked against. Its threads ask for real-time priority (best effort, like the generator's) so
delays hold on a busy machine.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any

import polars as pl

from tierscope.errors import InputError


def _delay_json(delay: float | dict[str, Any] | None) -> str:
    if delay is None or delay == 0:
        return "null"
    if isinstance(delay, int | float):
        if not delay >= 0:
            raise InputError("delay", delay, "seconds >= 0")
        return json.dumps({"dist": "det", "mean": float(delay)})
    return json.dumps(delay)


class TestServer:
    """A running test server; use as a context manager or call :meth:`close`."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        delay: float | dict[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        body_bytes: int = 64,
        threads: int = 1,
        seed: int = 0,
        record: bool = False,
        priority: str = "realtime",
    ) -> None:
        from tierscope import _native

        config = {
            "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            "delay": json.loads(_delay_json(delay)),
            "body_bytes": int(body_bytes),
            "threads": int(threads),
            "seed": int(seed),
            "record": bool(record),
            "priority": priority,
        }
        try:
            self._server = _native.TestServer(json.dumps(config))
        except ValueError as exc:
            raise InputError("test server", config, str(exc)) from None
        self.host, self.port = self._server.address

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def requests(self) -> int:
        """Requests answered so far."""
        return int(self._server.requests)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return int(self._server.connections)

    def set_delay(self, delay: float | dict[str, Any] | None) -> None:
        """Change the delay law (seconds, a distribution dict, or None for none)."""
        try:
            self._server.set_delay(_delay_json(delay))
        except ValueError as exc:
            raise InputError("delay", delay, str(exc)) from None

    def stall(self, seconds: float) -> tuple[float, float]:
        """Freeze every response for ``seconds`` from now; returns (start, end), monotonic s."""
        return self._server.stall(float(seconds))

    def take_log(self) -> pl.DataFrame:
        """Requests answered since the last call: ``request_id``, ``received``, ``sent``
        (monotonic s), ``delay`` (s asked for), ``status``. Empty unless ``record=True``."""
        log = self._server.take_log()
        return pl.DataFrame(
            log,
            schema={
                "request_id": pl.String,
                "received": pl.Float64,
                "sent": pl.Float64,
                "delay": pl.Float64,
                "status": pl.Int64,
            },
        )

    def close(self) -> None:
        """Stop serving and close every connection."""
        self._server.stop()

    def __enter__(self) -> TestServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
