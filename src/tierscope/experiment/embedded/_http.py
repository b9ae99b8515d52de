"""A small HTTP/1.1 server and keep-alive client pool on asyncio streams, for the embedded tiers.

Design decision: the tiers speak plain HTTP/1.1 with ``Content-Length`` bodies and keep-alive,
which is all the load generator, the web tier's proxy and a browser need; a dependency-free
implementation keeps the embedded system installable anywhere and its per-request CPU cost small
and visible (there is no framework doing hidden work inside a tier's CPU quota).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from tierscope.experiment.embedded._instrument import Gauges

MAX_HEAD = 64 * 1024
REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.target).query))

    @property
    def form(self) -> dict[str, str]:
        """Query parameters, overridden by an urlencoded body."""
        out = self.query
        if self.body:
            out.update(parse_qsl(self.body.decode("utf-8", "replace")))
        return out


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/html; charset=utf-8"

    def encode(self, keep_alive: bool) -> bytes:
        head = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Status')}"]
        head.append(f"Content-Type: {self.content_type}")
        head.append(f"Content-Length: {len(self.body)}")
        head.append("Connection: keep-alive" if keep_alive else "Connection: close")
        head.extend(f"{k}: {v}" for k, v in self.headers.items())
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + self.body


class HttpError(Exception):
    """A malformed request or response on the wire."""


def _parse_head(raw: bytes) -> tuple[str, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on a connection, or None when the peer closed it."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpError("connection closed inside a request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise HttpError("request head too large") from None
    first, headers = _parse_head(raw)
    parts = first.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(f"bad request line {first!r}")
    n = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(n) if n > 0 else b""
    return Request(parts[0].upper(), parts[1], headers, body)


Handler = Callable[[Request], Awaitable[Response]]


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
) -> None:
    """Serve requests on one keep-alive connection until the peer closes it."""
    try:
        while True:
            try:
                req = await read_request(reader)
            except (HttpError, ValueError):
                writer.write(Response(400, b"bad request").encode(False))
                break
            if req is None:
                break
            keep = req.headers.get("connection", "").lower() != "close"
            resp = await handler(req)
            writer.write(resp.encode(keep))
            if writer.transport.get_write_buffer_size() > 1 << 16:
                await writer.drain()
            if not keep:
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def start_server(
    handler: Handler, host: str, port: int, *, reuse_port: bool = False
) -> asyncio.Server:
    return await asyncio.start_server(
        lambda r, w: serve_connection(r, w, handler),
        host,
        port,
        limit=MAX_HEAD,
        reuse_port=reuse_port,
        backlog=1024,
    )


class Upstream:
    """A pool of keep-alive connections to one HTTP server (one app replica).

    ``outstanding`` counts the requests holding one of its ``max_connections`` (more wait for
    one); with ``gauges``, its slot ``pool_busy`` counts them too."""

    def __init__(
        self, host: str, port: int, *, max_connections: int, gauges: Gauges | None = None
    ) -> None:
        self.host, self.port = host, port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(max_connections)
        self.outstanding = 0
        self.gauges = gauges

    async def request(self, method: str, target: str, headers: dict[str, str], body: bytes):
        """Forward one request; returns (status, headers, body)."""
        async with self.slots:
            self.outstanding += 1
            if self.gauges is not None:
                self.gauges.add("pool_busy")
            try:
                for attempt in range(2):  # a kept-alive connection may have been closed: retry once
                    conn = self.idle.pop() if self.idle else None
                    fresh = conn is None
                    if conn is None:
                        conn = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
                    try:
                        result = await self._exchange(conn, method, target, headers, body)
                    except (ConnectionError, asyncio.IncompleteReadError, HttpError):
                        with contextlib.suppress(Exception):
                            conn[1].close()
                        if fresh or attempt:
                            raise
                        continue
                    if result[1].get("connection", "").lower() == "close":
                        conn[1].close()
                    else:
                        self.idle.append(conn)
                    return result
                raise ConnectionError("unreachable")
            finally:
                self.outstanding -= 1
                if self.gauges is not None:
                    self.gauges.add("pool_busy", -1)

    @staticmethod
    async def _exchange(conn, method, target, headers, body):
        reader, writer = conn
        head = [f"{method} {target} HTTP/1.1", "Host: tierscope", "Connection: keep-alive"]
        head.extend(f"{k}: {v}" for k, v in headers.items())
        head.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        raw = await reader.readuntil(b"\r\n\r\n")
        first, rheaders = _parse_head(raw)
        parts = first.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise HttpError(f"bad status line {first!r}")
        n = int(rheaders.get("content-length", "0") or 0)
        rbody = await reader.readexactly(n) if n else b""
        return int(parts[1]), rheaders, rbody

    def close(self) -> None:
        for _, w in self.idle:
            with contextlib.suppress(Exception):
                w.close()
        self.idle.clear()
