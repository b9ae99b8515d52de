"""Web tier: the HTTP front end; serves static files and load-balances pages to app replicas.

Like Apache with ``MaxClients`` in RUBBoS, at most ``workers`` requests are processed at once;
more wait in the tier's queue. Pages are proxied over keep-alive connection pools (``connections``
per app replica) to the app replica with the fewest outstanding requests (ties: round robin), so
``1/2/1`` really spreads load over two app servers. ``/static/...`` is answered by the web tier
alone (an interaction that never reaches the app or database tiers).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

from tierscope.experiment.embedded import _node
from tierscope.experiment.embedded._http import Request, Response, Upstream
from tierscope.experiment.embedded._instrument import Gauges, RequestLog, burn

#: Path prefix -> interaction name, for the request log (the app knows its own names).
PAGE_NAMES = {
    "/": "home",
    "/categories": "browse_categories",
    "/category": "browse_category",
    "/story": "view_story",
    "/comment": "view_comment",
    "/search": "search",
    "/user": "view_user",
    "/rate": "rate_comment",
}
STATIC = bytes(range(256)) * 16  # a 4 KB "logo"


def interaction_of(method: str, path: str) -> str:
    if path.startswith("/static/"):
        return "static"
    if method == "POST":
        return {"/comment": "post_comment", "/story": "submit_story", "/rate": "rate_comment"}.get(
            path, "unknown"
        )
    return PAGE_NAMES.get(path, "unknown")


class Web:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.costs = _node.costs_of(cfg)
        self.workers = int(cfg.get("workers", 64))
        per_upstream = int(cfg.get("connections") or self.workers)
        self.upstreams = [Upstream(h, int(p), max_connections=per_upstream) for h, p in cfg["app"]]
        self.gauges = Gauges(
            cfg["gauges"], workers=self.workers, pool_size=per_upstream * len(self.upstreams)
        )
        self.log = RequestLog(cfg["log"])
        self.slots = asyncio.Semaphore(self.workers)
        self.turn = itertools.count()
        self.ids = itertools.count()
        self.queue_limit = int(cfg.get("queue_limit") or 0)
        self.in_tier = 0

    def background(self) -> list[Any]:
        return []

    def close(self) -> None:
        for u in self.upstreams:
            u.close()
        self.log.close()

    def pick(self) -> Upstream:
        first = next(self.turn)
        n = len(self.upstreams)
        order = [self.upstreams[(first + i) % n] for i in range(n)]
        return min(order, key=lambda u: u.outstanding)

    async def handle(self, req: Request) -> Response:
        start = time.monotonic()
        self.gauges.add("arrivals")
        self.in_tier += 1
        rid = req.headers.get("x-request-id") or f"web-{os.getpid()}-{next(self.ids)}"
        interaction = interaction_of(req.method, req.path)
        try:
            if self.queue_limit and self.in_tier > self.queue_limit:
                resp = Response(503, b"web tier queue full", content_type="text/plain")
            else:
                async with self.slots:
                    with self.gauges.count("active"):
                        resp = await self._process(req, rid, interaction)
        except Exception as exc:
            resp = Response(502, f"upstream: {type(exc).__name__}: {exc}".encode())
        self.in_tier -= 1
        self.gauges.add("departures")
        status = "ok" if resp.status < 400 else str(resp.status)
        self.log.record(rid, interaction, start, time.monotonic(), status)
        return resp

    async def _process(self, req: Request, rid: str, interaction: str) -> Response:
        # The web tier's own CPU work (parsing, access control, logging in a real server).
        burn(self.costs.cpu_of(interaction))
        if interaction == "static":
            return Response(200, STATIC, content_type="image/png")
        upstream = self.pick()
        self.gauges.add("pool_busy")
        try:
            headers = {"X-Request-Id": rid}
            if req.body:
                headers["Content-Type"] = req.headers.get(
                    "content-type", "application/x-www-form-urlencoded"
                )
            status, rheaders, body = await upstream.request(
                req.method, req.target, headers, req.body
            )
        finally:
            self.gauges.add("pool_busy", -1)
        return Response(status, body, content_type=rheaders.get("content-type", "text/html"))


if __name__ == "__main__":
    _node.main(Web)
