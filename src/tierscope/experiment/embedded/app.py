"""Application tier: renders the bulletin board's pages and runs its business logic.

Requests arrive over HTTP (from the web tier) on an asyncio front end and are handed to a pool
of ``workers`` threads (a Tomcat-like thread pool: requests beyond it wait in the tier's queue).
A worker runs the interaction: named queries on the database tier through a connection pool of
``db_pool`` connections per database replica (reads go to one replica, round robin; writes go to
every replica, as C-JDBC's RAIDb-1 does in RUBBoS), the configured CPU and I/O cost, and HTML
rendering. Requests beyond ``queue_limit`` in the tier get 503 at once.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tierscope.experiment.embedded import _node
from tierscope.experiment.embedded._http import Request, Response
from tierscope.experiment.embedded._instrument import Gauges, RequestLog, burn, write_io
from tierscope.experiment.embedded.data import QUERIES, SIZES, pg_sql


class DbError(Exception):
    """The database tier answered with an error or went away."""


class DbPool:
    """Blocking connection pools to the database replicas, shared by the worker threads."""

    def __init__(
        self, replicas: list[tuple[str, int]], size: int, gauges: Gauges, token: str
    ) -> None:
        self.replicas = replicas
        # Sent first on every new connection (the db tier's authentication, see its module).
        self.hello = json.dumps({"auth": token}).encode() + b"\n"
        self.pools: list[queue.LifoQueue] = []
        for _ in replicas:
            q: queue.LifoQueue = queue.LifoQueue()
            for _ in range(size):
                q.put(None)  # a free slot; connected on first use
            self.pools.append(q)
        self.turn = itertools.count()
        self.gauges = gauges

    def _call(self, i: int, msg: bytes) -> list[Any]:
        pool = self.pools[i]
        conn = pool.get()
        self.gauges.add("pool_busy")
        try:
            if conn is None:
                sock = socket.create_connection(self.replicas[i], timeout=60)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = (sock, sock.makefile("rb"))
                msg = self.hello + msg  # one write: no extra round trip
            try:
                conn[0].sendall(msg)
                line = conn[1].readline()
                if not line:
                    raise DbError("database connection closed")
            except (OSError, DbError):
                conn[1].close()
                conn[0].close()
                conn = None
                raise
            answer = json.loads(line)
            if "error" in answer:
                raise DbError(answer["error"])
            return answer["rows"]
        except OSError as exc:
            raise DbError(str(exc)) from exc
        finally:
            self.gauges.add("pool_busy", -1)
            pool.put(conn)

    def query(self, rid: str, interaction: str, name: str, args: list[Any], share: float):
        msg = json.dumps({"r": rid, "i": interaction, "q": name, "a": args, "w": share}) + "\n"
        data = msg.encode()
        if QUERIES[name][1]:  # write-all
            rows: list[Any] = []
            for i in range(len(self.replicas)):
                rows = self._call(i, data)
            return rows
        return self._call(next(self.turn) % len(self.replicas), data)


class PgPool:
    """The same interface over PostgreSQL (the webstack target), one psycopg connection per
    pooled slot. PostgreSQL keeps no request log of ours, so the app records each query's time
    as seen from here (``db_log``): the database tier's rows in a webstack run."""

    def __init__(self, dsn: str, size: int, gauges: Gauges, log: RequestLog | None) -> None:
        import psycopg

        self.connect = lambda: psycopg.connect(dsn, autocommit=True)
        self.error = psycopg.Error
        self.pool: queue.LifoQueue = queue.LifoQueue()
        for _ in range(size):
            self.pool.put(None)
        self.gauges = gauges
        self.log = log

    def query(self, rid: str, interaction: str, name: str, args: list[Any], share: float):
        conn = self.pool.get()
        self.gauges.add("pool_busy")
        start = time.monotonic()
        status = "ok"
        try:
            if conn is None:
                conn = self.connect()
            cur = conn.execute(pg_sql(name), args)
            return [list(r) for r in cur.fetchall()] if cur.description else []
        except self.error as exc:
            status = "error"
            if conn is not None and conn.closed:
                conn = None
            raise DbError(str(exc)) from exc
        except OSError as exc:
            status, conn = "error", None
            raise DbError(str(exc)) from exc
        finally:
            if self.log is not None:
                self.log.record(rid, interaction, start, time.monotonic(), status, name)
            self.gauges.add("pool_busy", -1)
            self.pool.put(conn)


# ---- pages -----------------------------------------------------------------------------------
def _page(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
        f"<h1>{html.escape(title)}</h1>{body}</body></html>"
    ).encode()


def _rows(rows: list[list[Any]], link: str = "") -> str:
    items = []
    for r in rows:
        cells = " · ".join(html.escape(str(c)) for c in r[1:])
        items.append(
            f'<li><a href="{link}{r[0]}">{cells}</a></li>' if link else f"<li>{cells}</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def _int(form: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    try:
        value = int(form.get(key, default))
    except ValueError:
        value = default
    return min(max(value, low), high)


Interaction = Callable[["App", str, dict[str, str]], bytes]


def home(app: App, rid: str, f: dict[str, str]) -> bytes:
    rows = app.q(rid, "home", "stories_of_the_day", [], 1)
    return _page("Stories of the day", _rows(rows, "/story?id="))


def browse_categories(app: App, rid: str, f: dict[str, str]) -> bytes:
    rows = app.q(rid, "browse_categories", "categories", [], 1)
    return _page("Categories", _rows(rows, "/category?id="))


def browse_category(app: App, rid: str, f: dict[str, str]) -> bytes:
    cat = _int(f, "id", 1, 1, SIZES["categories"])
    page = _int(f, "page", 0, 0, 50)
    rows = app.q(rid, "browse_category", "stories_in_category", [cat, 20 * page], 1)
    return _page(f"Category {cat}", _rows(rows, "/story?id="))


def view_story(app: App, rid: str, f: dict[str, str]) -> bytes:
    sid = _int(f, "id", 1, 1, 1 << 40)
    story = app.q(rid, "view_story", "story", [sid], 2)
    comments = app.q(rid, "view_story", "comments_of_story", [sid], 2)
    if not story:
        return _page("No such story", "")
    s = story[0]
    body = f"<p>{html.escape(s[2])}</p><p>by {html.escape(s[6])}</p>" + _rows(
        comments, "/comment?id="
    )
    return _page(s[1], body)


def view_comment(app: App, rid: str, f: dict[str, str]) -> bytes:
    cid = _int(f, "id", 1, 1, 1 << 40)
    rows = app.q(rid, "view_comment", "comment", [cid], 1)
    if not rows:
        return _page("No such comment", "")
    c = rows[0]
    return _page(c[2], f"<p>{html.escape(c[3])}</p><p>by {html.escape(c[6])}</p>")


def search(app: App, rid: str, f: dict[str, str]) -> bytes:
    word = f.get("q", "queue")[:40]
    rows = app.q(rid, "search", "search_stories", [f"%{word}%"], 1)
    return _page(f"Search: {word}", _rows(rows, "/story?id="))


def view_user(app: App, rid: str, f: dict[str, str]) -> bytes:
    uid = _int(f, "id", 1, 1, 1 << 40)
    user = app.q(rid, "view_user", "user", [uid], 2)
    comments = app.q(rid, "view_user", "comments_of_user", [uid], 2)
    name = user[0][1] if user else "unknown"
    return _page(f"User {name}", _rows(comments, "/comment?id="))


def post_comment(app: App, rid: str, f: dict[str, str]) -> bytes:
    story = _int(f, "story", 1, 1, SIZES["stories"])
    author = _int(f, "author", 1, 1, SIZES["users"])
    subject, body = f.get("subject", "re")[:200], f.get("body", "")[:4000]
    args = [story, 0, author, subject, body, time.time()]
    app.q(rid, "post_comment", "insert_comment", args, 2)
    app.q(rid, "post_comment", "rate_user", [1, author], 2)
    return _page("Comment posted", f'<a href="/story?id={story}">back</a>')


def submit_story(app: App, rid: str, f: dict[str, str]) -> bytes:
    author = _int(f, "author", 1, 1, SIZES["users"])
    cat = _int(f, "category", 1, 1, SIZES["categories"])
    args = [f.get("title", "untitled")[:200], f.get("body", "")[:8000], author, cat, time.time()]
    app.q(rid, "submit_story", "insert_story", args, 1)
    return _page("Story submitted", "")


def rate_comment(app: App, rid: str, f: dict[str, str]) -> bytes:
    cid = _int(f, "id", 1, 1, SIZES["comments"])
    delta = _int(f, "delta", 1, -1, 1)
    app.q(rid, "rate_comment", "rate_comment", [delta, cid], 2)
    app.q(rid, "rate_comment", "rate_user", [delta, _int(f, "author", 1, 1, SIZES["users"])], 2)
    return _page("Rated", "")


#: (method, path) -> interaction. The names are the workload's interaction names.
ROUTES: dict[tuple[str, str], tuple[str, Interaction]] = {
    ("GET", "/"): ("home", home),
    ("GET", "/categories"): ("browse_categories", browse_categories),
    ("GET", "/category"): ("browse_category", browse_category),
    ("GET", "/story"): ("view_story", view_story),
    ("GET", "/comment"): ("view_comment", view_comment),
    ("GET", "/search"): ("search", search),
    ("GET", "/user"): ("view_user", view_user),
    ("POST", "/comment"): ("post_comment", post_comment),
    ("POST", "/story"): ("submit_story", submit_story),
    ("POST", "/rate"): ("rate_comment", rate_comment),
}
INTERACTIONS = tuple(name for name, _ in ROUTES.values())


class App:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.costs = _node.costs_of(cfg)
        self.workers = int(cfg.get("workers", 16))
        pool = int(cfg.get("db_pool", 8))
        self.log = RequestLog(cfg["log"])
        self.db_log: RequestLog | None = None
        self.db: DbPool | PgPool
        if "postgres" in cfg:
            self.gauges = Gauges(cfg["gauges"], workers=self.workers, pool_size=pool)
            self.db_log = RequestLog(cfg["db_log"]) if cfg.get("db_log") else None
            self.db = PgPool(cfg["postgres"], pool, self.gauges, self.db_log)
        else:
            replicas = [(h, int(p)) for h, p in cfg["db"]]
            self.gauges = Gauges(
                cfg["gauges"], workers=self.workers, pool_size=pool * len(replicas)
            )
            self.db = DbPool(replicas, pool, self.gauges, str(cfg.get("db_token", "")))
        self.executor = ThreadPoolExecutor(self.workers, thread_name_prefix="worker")
        self.queue_limit = int(cfg.get("queue_limit") or 0)
        self.in_tier = 0
        self.ids = itertools.count()

    def q(self, rid: str, interaction: str, name: str, args: list[Any], n_queries: int):
        """One named query; ``n_queries`` splits the interaction's database cost evenly."""
        return self.db.query(rid, interaction, name, args, 1.0 / n_queries)

    def _run(self, fn: Interaction, interaction: str, rid: str, form: dict[str, str]) -> Response:
        with self.gauges.count("active"):
            try:
                page = fn(self, rid, form)
            except DbError as exc:
                self.gauges.add("errors")
                return Response(502, f"database error: {exc}".encode(), content_type="text/plain")
            burn(self.costs.cpu_of(interaction))
            write_io(self.cfg["io_file"], self.costs.io_of(interaction))
            return Response(200, page)

    def background(self) -> list[Any]:
        return []

    def close(self) -> None:
        self.log.close()
        if self.db_log is not None:
            self.db_log.close()

    async def handle(self, req: Request) -> Response:
        start = time.monotonic()
        self.gauges.add("arrivals")
        self.in_tier += 1
        rid = req.headers.get("x-request-id") or f"app-{os.getpid()}-{next(self.ids)}"
        route = ROUTES.get((req.method, req.path))
        interaction = route[0] if route else "unknown"
        try:
            if route is None:
                resp = Response(404, b"not found", content_type="text/plain")
            elif self.queue_limit and self.in_tier > self.queue_limit:
                resp = Response(503, b"app tier queue full", content_type="text/plain")
            else:
                loop = asyncio.get_running_loop()
                resp = await loop.run_in_executor(
                    self.executor, self._run, route[1], interaction, rid, req.form
                )
        except Exception as exc:  # a bug in a page must not take the tier down
            resp = Response(500, f"{type(exc).__name__}: {exc}".encode(), content_type="text/plain")
        self.in_tier -= 1
        self.gauges.add("departures")
        status = "ok" if resp.status < 400 else str(resp.status)
        self.log.record(rid, interaction, start, time.monotonic(), status)
        return resp


if __name__ == "__main__":
    threading.current_thread().name = "app"
    _node.main(App)
