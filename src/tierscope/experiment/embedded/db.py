"""Database tier: a query server over TCP backed by SQLite (one thread per client connection).

Protocol: one JSON object per line in each direction. A connection's first line must be
``{"auth": token}`` with the token the runner made for this deployment (given to the app tier
only); any other first line is answered ``{"error": "authentication required"}`` and the
connection is closed, so no other local process can run queries. Then a request is
``{"r": request_id, "i": interaction, "q": query_name, "a": [args], "w": share}`` and the answer
``{"rows": [...]}`` or ``{"error": "..."}``. ``share`` is this query's share of the interaction's
configured database cost (the app splits the cost over the queries it sends), so a tier's
configured CPU demand per request holds however many queries a page needs.

Like PostgreSQL, each client connection is served by its own worker (``workers`` of them); more
connections than workers wait to be accepted. Every query is recorded (one request-log row per
query, with the query name as ``detail``) and counted in the gauges while it is executed.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import queue
import signal
import socket
import sqlite3
import threading
import time
from typing import Any

from tierscope.experiment.embedded import _node
from tierscope.experiment.embedded._instrument import Gauges, RequestLog, burn, write_io
from tierscope.experiment.embedded.data import QUERIES

#: How long a new connection may take to authenticate, and the longest first line read.
AUTH_TIMEOUT_S = 10.0
MAX_AUTH_LINE = 4096


class QueryServer:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.token = str(cfg["token"]).encode()  # no token, no server
        self.costs = _node.costs_of(cfg)
        self.workers = int(cfg.get("workers", 32))
        self.gauges = Gauges(cfg["gauges"], workers=self.workers, pool_size=self.workers)
        self.log = RequestLog(cfg["log"])
        self.conns: queue.Queue[socket.socket | None] = queue.Queue()
        self.stop = threading.Event()

    def serve(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((self.cfg.get("host", "127.0.0.1"), int(self.cfg.get("port", 0))))
        sock.listen(1024)
        for _ in range(self.workers):
            threading.Thread(target=self._worker, daemon=True).start()
        _node.announce(self.cfg, sock.getsockname()[1])
        sock.settimeout(0.5)
        while not self.stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns.put(conn)
        sock.close()
        self.log.close()

    def _connect_db(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.cfg["database"], timeout=10.0, isolation_level=None)
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute("PRAGMA busy_timeout=10000")
        return con

    def _worker(self) -> None:
        db = self._connect_db()
        while True:
            conn = self.conns.get()
            if conn is None:
                return
            with self.gauges.count("pool_busy"):
                self._serve_connection(conn, db)

    def _authenticated(self, conn: socket.socket, reader: Any) -> bool:
        """Whether the connection's first line carries this deployment's token."""
        conn.settimeout(AUTH_TIMEOUT_S)  # a silent client must not hold a worker for long
        try:
            line = reader.readline(MAX_AUTH_LINE)
            given = json.loads(line).get("auth")
            ok = isinstance(given, str) and hmac.compare_digest(given.encode(), self.token)
        except (OSError, ValueError, AttributeError):
            ok = False
        if not ok:
            with contextlib.suppress(OSError):
                conn.sendall(b'{"error": "authentication required"}\n')
            return False
        conn.settimeout(None)
        return True

    def _serve_connection(self, conn: socket.socket, db: sqlite3.Connection) -> None:
        reader = conn.makefile("rb")
        try:
            if not self._authenticated(conn, reader):
                return
            for line in reader:
                start = time.monotonic()
                self.gauges.add("arrivals")
                answer, status, name, rid, interaction = self._execute(line, db)
                try:
                    conn.sendall(answer)
                finally:
                    end = time.monotonic()
                    self.gauges.add("departures")
                    self.log.record(rid, interaction, start, end, status, name)
        except OSError:
            pass
        finally:
            reader.close()
            conn.close()

    def _execute(self, line: bytes, db: sqlite3.Connection):
        rid, interaction, name = "", "", ""
        try:
            msg = json.loads(line)
            rid, interaction, name = str(msg.get("r", "")), str(msg.get("i", "")), msg["q"]
            sql, writes = QUERIES[name]
            share = float(msg.get("w", 1.0))
            with self.gauges.count("active"):
                rows = db.execute(sql, msg.get("a", [])).fetchall()
                burn(self.costs.cpu_of(interaction) * share)
                if writes:
                    write_io(self.cfg["io_file"], round(self.costs.io_of(interaction) * share))
            return json.dumps({"rows": rows}).encode() + b"\n", "ok", name, rid, interaction
        except (KeyError, ValueError, TypeError, sqlite3.Error) as exc:
            self.gauges.add("errors")
            body = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n"
            return body, "error", name, rid, interaction


def main() -> None:
    _node.exit_on_parent_death()
    cfg = _node.load_config()
    server = QueryServer(cfg)
    signal.signal(signal.SIGTERM, lambda *_: server.stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        server.serve()
    server.log.close()
    os._exit(0)  # worker threads block in recv; the runner wants us gone now


if __name__ == "__main__":
    main()
