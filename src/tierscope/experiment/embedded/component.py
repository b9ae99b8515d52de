"""A component of an embedded system given as a call graph (``system.components``).

One process of one replica: an HTTP front end on asyncio streams. A visit waits for one of
``workers`` slots (more wait in the component's queue; beyond ``queue_limit`` requests in the
component it answers 503 at once), does the configured CPU work (``cpu_cost``, CPU seconds) and
storage I/O (``io_cost`` bytes written and fsynced, when ``storage``), then makes its calls: each
call ``{to, p, times}`` is made with probability ``p``, ``times`` visits to the callee, to the
callee replica with the fewest outstanding requests over a keep-alive pool of ``pool``
connections per replica; in sequence, or all together and joined (``parallel``).

Each callee has a gauge file of its own (``calls_<callee>``): slot ``active`` counts the calls
outstanding to it (the monitor's ``calls_out:<callee>``, what waits at a callee's door, which a
paused callee cannot count itself), ``pool_busy`` the calls holding one of its connections and
``pool_size`` its connections (``pool`` per replica); the others wait for one. So each pool is
its own resource (``pool_util:<callee>``), never more than full. Every visit is recorded
(request id from ``X-Request-Id``; the visit's own id and its parent's, from
``X-Parent-Visit``, in the record's detail: ``VISIT PARENT``), so a request's path through the
graph can be rebuilt. A callee's error makes the visit answer 502.

A callee's replicas can change while the system runs (``Deployment.scale``): the deployment
rewrites the callee's peers file (``peers``: a JSON list of ``[host, port]``), each caller
re-reads it within :data:`PEERS_POLL_S`, sends new calls only to the replicas listed and lets
the calls outstanding to a dropped one finish before it closes its connections.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierscope.experiment.embedded import _node
from tierscope.experiment.embedded._http import Request, Response, Upstream
from tierscope.experiment.embedded._instrument import Gauges, RequestLog, burn, write_io

PARENT_HEADER = "X-Parent-Visit"
#: How often a caller looks for a change of its callees' replicas (s).
PEERS_POLL_S = 0.1


@dataclass
class Callee:
    to: str
    p: float
    times: int
    replicas: list[Upstream]
    pool: int
    gauges: Gauges
    peers: Path | None = None
    seen: int | None = None  # the peers file's mtime (ns) last read

    def reload(self, retiring: list[Upstream]) -> None:
        """Follow the peers file: new replicas get a pool, dropped ones go to ``retiring``."""
        if self.peers is None:
            return
        try:
            mtime = self.peers.stat().st_mtime_ns
            if mtime == self.seen:
                return
            listed = [(str(h), int(port)) for h, port in json.loads(self.peers.read_text())]
        except (OSError, ValueError, TypeError):
            return  # being replaced (the writer renames a new file in): the next poll reads it
        self.seen = mtime
        have = {(u.host, u.port): u for u in self.replicas}
        if not listed or set(listed) == set(have):
            return
        self.replicas = [have.get(a) or self.upstream(a[0], a[1]) for a in listed]
        retiring.extend(u for a, u in have.items() if a not in set(listed))
        self.gauges.set("pool_size", self.pool * len(self.replicas))

    def upstream(self, host: str, port: int) -> Upstream:
        return Upstream(host, port, max_connections=self.pool, gauges=self.gauges)


class Component:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.name = str(cfg["name"])
        self.costs = _node.costs_of(cfg)
        self.workers = int(cfg.get("workers") or 64)
        self.pool = pool = int(cfg.get("pool") or self.workers)
        self.callees: list[Callee] = []
        for c in cfg.get("calls", []):
            to = str(c["to"])
            callee = Callee(
                to=to,
                p=float(c.get("p", 1.0)),
                times=int(c.get("times", 1)),
                replicas=[],
                pool=pool,
                gauges=Gauges(cfg[f"calls_{to}"], pool_size=pool * len(c["at"])),
                peers=Path(c["peers"]) if c.get("peers") else None,
            )
            callee.replicas = [callee.upstream(h, int(port)) for h, port in c["at"]]
            self.callees.append(callee)
        self.retiring: list[Upstream] = []
        self.parallel = bool(cfg.get("parallel"))
        self.io_file = cfg["io_file"] if cfg.get("storage") else None
        # the pools are the callees' (their gauge files); this one counts requests and workers
        self.gauges = Gauges(cfg["gauges"], workers=self.workers)
        self.log = RequestLog(cfg["log"])
        self.slots = asyncio.Semaphore(self.workers)
        self.queue_limit = int(cfg.get("queue_limit") or 0)
        self.in_tier = 0
        self.ids = itertools.count()
        self.turn = itertools.count()
        self.rng = random.Random(f"{cfg.get('seed', 1)}/{self.name}/{os.getpid()}")

    async def handle(self, req: Request) -> Response:
        start = time.monotonic()
        self.gauges.add("arrivals")
        self.in_tier += 1
        visit = f"{self.name}.{os.getpid()}.{next(self.ids)}"
        rid = req.headers.get("x-request-id") or visit
        parent = req.headers.get(PARENT_HEADER.lower(), "")
        interaction = req.path.strip("/").split("/")[0] or "visit"
        try:
            if self.queue_limit and self.in_tier > self.queue_limit:
                resp = Response(503, f"{self.name} queue full".encode(), content_type="text/plain")
            else:
                async with self.slots:
                    with self.gauges.count("active"):
                        resp = await self._visit(req, rid, visit, interaction)
        except Exception as exc:  # a bug or a lost callee must not take the component down
            resp = Response(502, f"{type(exc).__name__}: {exc}".encode(), content_type="text/plain")
        self.in_tier -= 1
        self.gauges.add("departures")
        status = "ok" if resp.status < 400 else str(resp.status)
        self.log.record(rid, interaction, start, time.monotonic(), status, f"{visit} {parent}")
        return resp

    async def _visit(self, req: Request, rid: str, visit: str, interaction: str) -> Response:
        burn(self.costs.cpu_of(interaction))
        if self.io_file is not None:
            write_io(self.io_file, self.costs.io_of(interaction))
        made = [c for c in self.callees for _ in range(c.times if self.rng.random() < c.p else 0)]
        if self.parallel:
            statuses = await asyncio.gather(*(self._call(c, req, rid, visit) for c in made))
        else:
            statuses = [await self._call(c, req, rid, visit) for c in made]
        failed = [s for s in statuses if s >= 400]
        if failed:
            self.gauges.add("errors")
            body = f"a callee answered {failed[0]}".encode()
            return Response(502, body, content_type="text/plain")
        return Response(200, f"{self.name} ok".encode(), content_type="text/plain")

    async def _call(self, callee: Callee, req: Request, rid: str, visit: str) -> int:
        # ``active``: the call is outstanding, holding one of the pool's connections (the
        # Upstream counts ``pool_busy``) or waiting for one
        with callee.gauges.count("active"):
            headers = {"X-Request-Id": rid, PARENT_HEADER: visit}
            while True:
                upstream = self._least_loaded(callee)
                try:
                    status, _, _ = await upstream.request("GET", req.target, headers, b"")
                    return int(status)
                except (ConnectionError, asyncio.IncompleteReadError):
                    # a replica scaled away before this caller saw it go: the call goes to
                    # one that is there; any other failure is the callee's answer
                    if any(u is upstream for u in callee.replicas):
                        raise

    def _least_loaded(self, callee: Callee) -> Upstream:
        first = next(self.turn)
        n = len(callee.replicas)
        return min(
            (callee.replicas[(first + i) % n] for i in range(n)), key=lambda u: u.outstanding
        )

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return [self.follow_peers()]

    def close(self) -> None:
        for c in self.callees:
            for u in c.replicas:
                u.close()
        for u in self.retiring:
            u.close()
        self.log.close()

    async def follow_peers(self) -> None:
        """Keep each callee's replicas as its peers file lists them; close dropped replicas'
        connections once no call is outstanding there."""
        while True:
            for c in self.callees:
                c.reload(self.retiring)
            for u in [u for u in self.retiring if u.outstanding == 0]:
                u.close()
                self.retiring.remove(u)
            await asyncio.sleep(PEERS_POLL_S)


if __name__ == "__main__":
    _node.main(Component)
