"""The webstack target: nginx → the bulletin board's app tier → PostgreSQL 15, from Debian.

Everything runs from a temporary folder on kernel-chosen loopback ports, each server in its
node's cgroup: PostgreSQL (``initdb`` + ``postgres`` in the foreground as the ``postgres``
user, initdb refuses root), the app replicas (the embedded app tier with its PostgreSQL
backend), and nginx (``daemon off``, load-balancing to the app replicas over keep-alive).

Nothing is open to other local users: PostgreSQL asks every client for a password
(SCRAM-SHA-256) that is made for the run and known only to the run (the app tier reads it from
its 0600 config file; it is never written to the run folder), its socket is in a 0700 folder,
and nginx's workers run as ``nobody`` (the master, which only reads the configuration and opens
the logs and the port, stays root).

Per-tier records: nginx's access log (``$msec``, ``$request_time`` and the client's
``X-Request-Id``, one JSON object per line, so a request id is data whatever it holds; its
wall-clock times are converted to CLOCK_MONOTONIC with an offset measured at start), the app
tier's own log, and for the database each query as timed by the app (PostgreSQL keeps no
per-query log of ours). Gauges: the app's; nginx's
``stub_status`` (requests being processed) and PostgreSQL's ``pg_stat_activity`` (active
backends) and ``pg_stat_database`` (transactions, blocks read, tuples) sampled by the monitor.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import secrets
import shutil
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import polars as pl

from tierscope.errors import InputError
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.processes import StartError, Supervisor
from tierscope.experiment.targets import CsvTail, Deployment, Node, register
from tierscope.experiment.targets.embedded import (
    WORKLOAD_FILE,
    node_cgroup,
    processes_for,
    quota_free,
    spawn_tier_processes,
    tier_config,
)
from tierscope.spec.experiment import SystemSpec, TierSpec

PG_BIN = Path(os.environ.get("TIERSCOPE_PG_BIN", "/usr/lib/postgresql/15/bin"))
NGINX = os.environ.get("TIERSCOPE_NGINX", "/usr/sbin/nginx")
INSTALL_HINT = "apt-get install -y nginx-light postgresql-15 (and pip install 'psycopg[binary]')"


def nginx_workers(spec: TierSpec) -> int:
    """nginx worker processes: as given, else about as many as the quota's cores."""
    return max(1, int(spec.processes or round(spec.cpu or 1) or 1))


def missing_parts() -> list[str]:
    """What the webstack needs and this host lacks (empty when it can run)."""
    missing = []
    if not Path(NGINX).is_file():
        missing.append(f"nginx ({NGINX})")
    if not (PG_BIN / "postgres").is_file():
        missing.append(f"PostgreSQL 15 ({PG_BIN}/postgres)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing.append("the psycopg Python package")
    return missing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check(system: SystemSpec) -> None:
    for tier in ("web", "db"):
        t = system.tier(tier)
        for key in ("cpu_cost", "io_cost", "processes"):
            if getattr(t, key) is not None:
                raise InputError(
                    f"system.tiers.{tier}.{key}",
                    getattr(t, key),
                    f"not set: in a webstack the {tier} tier is "
                    f"{'nginx' if tier == 'web' else 'PostgreSQL'}, which has no such knob",
                )
    missing = missing_parts()
    if missing:
        raise InputError(
            "system.kind", "webstack", f"a host with {', '.join(missing)} ({INSTALL_HINT})"
        )


def start_postgres(
    workdir: Path, supervisor: Supervisor, cgroup: NodeCgroup | None, spec: Any
) -> tuple[str, Any]:
    """initdb + postgres in the foreground as user postgres; returns (dsn, process). The dsn
    holds the run's password: give it only to the run's own processes (see :func:`public_dsn`)."""
    data = workdir / "pg"
    data.mkdir(mode=0o700)  # the server's socket is in here: only postgres (and root) reach it
    # The run's temporary folder is private (0700); the postgres user must be able to enter it.
    _traversable(workdir)
    shutil.chown(data, "postgres", "postgres")
    password = secrets.token_hex(24)
    pwfile = data / "pwfile"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    shutil.chown(pwfile, "postgres", "postgres")
    runas = ["runuser", "-u", "postgres", "--"]
    initdb = [str(PG_BIN / "initdb"), "-D", str(data / "data"), "-U", "postgres", "-E", "UTF8"]
    try:
        supervisor.run_once(
            "pg-initdb",
            [*runas, *initdb, "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"],
        )
    finally:
        pwfile.unlink(missing_ok=True)
    workers = spec.workers or 100
    for port_try in range(5):
        port = _free_port()
        argv = [
            *runas,
            str(PG_BIN / "postgres"),
            "-D",
            str(data / "data"),
            "-p",
            str(port),
            "-k",
            str(data),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"max_connections={workers + 10}",
            "-c",
            "shared_buffers=64MB",
            "-c",
            "fsync=on",
            "-c",
            "synchronous_commit=on",
        ]
        proc = supervisor.spawn(f"db-1.try{port_try}", argv, node=cgroup)
        dsn = f"host=127.0.0.1 port={port} dbname=postgres user=postgres password={password}"
        if _wait_pg(dsn, proc):
            return dsn, proc
    raise StartError(f"PostgreSQL did not start; see {workdir}/db-1.try*.log")


def public_dsn(dsn: str) -> str:
    """``dsn`` without its password, for what is shown or stored."""
    return " ".join(p for p in dsn.split() if not p.startswith("password="))


def _traversable(workdir: Path) -> None:
    """Let the servers' own users (postgres, nginx's workers) enter the run's folders, which
    tempfile makes 0700; they still cannot list them, and every file that holds a secret is
    0600."""
    for folder in (workdir.parent, workdir):
        folder.chmod(folder.stat().st_mode | 0o011)


def _wait_pg(dsn: str, proc: Any, timeout_s: float = 30.0) -> bool:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with psycopg.connect(dsn, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            time.sleep(0.05)
    return False


class PgActivity:
    """Per-tick PostgreSQL gauges for the monitor (one autocommit connection)."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.prev: tuple[float, float, float, float] | None = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def __call__(self) -> dict[str, float]:
        row = self.conn.execute(
            "SELECT (SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'), "
            "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'), "
            "sum(xact_commit), sum(blks_read), sum(tup_returned) FROM pg_stat_database"
        ).fetchone()
        active, conns, xacts, blks, tups = (float(x or 0) for x in row)
        now = time.monotonic()
        out = {"queue_length": active, "active_workers": active, "connections": conns}
        if self.prev is not None:
            dt = now - self.prev[0]
            out["xact_commit_s"] = (xacts - self.prev[1]) / dt
            out["blks_read_s"] = (blks - self.prev[2]) / dt
            out["tup_returned_s"] = (tups - self.prev[3]) / dt
        self.prev = (now, xacts, blks, tups)
        return out


NGINX_CONF = """
worker_processes {workers};
{user}
error_log {dir}/nginx-error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    client_body_temp_path {dir}/nginx-tmp;
    proxy_temp_path {dir}/nginx-tmp;
    log_format tierscope escape=json '{{"id":"$http_x_request_id","method":"$request_method",'
                         '"uri":"$uri","msec":"$msec","time":"$request_time","status":"$status"}}';
    access_log {dir}/nginx-access.log tierscope buffer=64k flush=200ms;
    upstream app {{
        least_conn;
{servers}
        keepalive {keepalive};
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location = /nginx_status {{ stub_status; access_log off; }}
        location /static/ {{ root {dir}/www; }}
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Request-Id $http_x_request_id;
        }}
    }}
}}
"""


def nginx_user() -> str:
    """The ``user`` directive: workers as nobody when the master runs as root (nginx ignores
    the directive otherwise)."""
    if os.geteuid() != 0:
        return ""
    for group in ("nogroup", "nobody"):
        with contextlib.suppress(KeyError):
            grp.getgrnam(group)
            return f"user nobody {group};"
    return "user nobody;"


class NginxLog:
    """The rows nginx appended to its access log, as request records (monotonic seconds).

    nginx writes the client's header bytes as they came, JSON-escaped; a line is decoded as
    Latin-1 like the embedded tiers decode headers, so one id is the same string in every tier.
    A line that is not a record is skipped and counted (:attr:`skipped`)."""

    def __init__(self, path: Path, epoch_to_monotonic: float) -> None:
        self.tail = CsvTail(path, header=False)
        self.offset = epoch_to_monotonic
        self.skipped = self.tail.skipped

    def __call__(self) -> pl.DataFrame:
        rows = []
        for line in self.tail.raw().split(b"\n")[:-1]:  # whole lines only
            try:
                rec = json.loads(line.decode("latin-1"))
                end = float(rec["msec"]) + self.offset
                status = int(rec["status"])
                rows.append(
                    (
                        str(rec["id"]) or None,
                        _interaction(str(rec["method"]), str(rec["uri"])),
                        end - float(rec["time"]),
                        end,
                        "ok" if status < 400 else str(status),
                        None,
                    )
                )
            except (ValueError, KeyError, TypeError):
                self.skipped.add(line)
        return pl.DataFrame(rows, schema=CsvTail.SCHEMA, orient="row")


def _interaction(method: str, uri: str) -> str:
    from tierscope.experiment.embedded.web import interaction_of

    return interaction_of(method, uri)


class NginxStatus:
    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url, timeout=1) as resp:
            text = resp.read().decode()
        lines = text.splitlines()
        active = float(lines[0].split(":")[1])
        _reading, wr, wait = (float(x) for x in lines[3].split()[1::2])
        # "writing" includes this status request itself.
        return {"queue_length": max(0.0, wr - 1), "connections": active, "idle_connections": wait}


def start_webstack(
    system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
) -> Deployment:
    _check(system)
    from tierscope.experiment.embedded.data import seed_postgres

    nodes: list[Node] = []
    db_spec = system.tier("db")
    db_cg = node_cgroup(hierarchy, supervisor, "db-1", db_spec)
    dsn, pg = start_postgres(workdir, supervisor, db_cg, db_spec)
    seed_postgres(dsn, seed=system.seed)
    db = Node("db", "db-1", 1, db_cg, db_spec.cpu, pgids=[pg.pid])
    activity = PgActivity(dsn)
    db.extra_metrics = activity
    nodes.append(db)

    app_spec = system.tier("app")
    app_endpoints = []
    for r in range(1, system.replicas["app"] + 1):
        name = f"app-{r}"
        cg = node_cgroup(hierarchy, supervisor, name, app_spec)
        node = Node("app", name, r, cg, app_spec.cpu)
        cfg = tier_config("app", app_spec)
        cfg["postgres"] = dsn
        extra = {"db_log": "db.csv"}
        port, started = spawn_tier_processes(
            supervisor, node, cfg, workdir, processes_for(app_spec), extra
        )
        db.request_sources.extend(CsvTail(files["db_log"]) for files in started)
        app_endpoints.append(port)
        nodes.append(node)

    web_spec = system.tier("web")
    www = workdir / "www" / "static"
    www.mkdir(parents=True)
    (www / "logo.png").write_bytes(bytes(range(256)) * 16)
    (workdir / "nginx-tmp").mkdir()
    for path in (workdir / "www", www, www / "logo.png"):  # read by the workers (nobody)
        path.chmod(0o755 if path.is_dir() else 0o644)
    _traversable(workdir)
    web_cg = node_cgroup(hierarchy, supervisor, "web-1", web_spec)
    epoch_to_monotonic = time.monotonic() - time.time()
    for attempt in range(5):
        port = _free_port()
        conf = workdir / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                workers=nginx_workers(web_spec),
                user=nginx_user(),
                dir=workdir,
                port=port,
                servers="\n".join(f"        server 127.0.0.1:{p};" for p in app_endpoints),
                keepalive=web_spec.connections or 64,
            )
        )
        nginx = supervisor.spawn(
            f"web-1.try{attempt}", [NGINX, "-c", str(conf), "-g", "daemon off;"], node=web_cg
        )
        if _wait_http(f"http://127.0.0.1:{port}/nginx_status", nginx):
            break
    else:
        raise StartError(f"nginx did not start; see {workdir}/nginx-error.log")
    web = Node("web", "web-1", 1, web_cg, web_spec.cpu, pgids=[nginx.pid])
    web.request_sources.append(NginxLog(workdir / "nginx-access.log", epoch_to_monotonic))
    web.extra_metrics = NginxStatus(f"http://127.0.0.1:{port}/nginx_status")
    nodes.insert(0, web)

    from tierscope.spec._load import load_yaml

    return Deployment(
        nodes=nodes,
        entry_urls=[f"http://127.0.0.1:{port}"],
        workload=load_yaml(WORKLOAD_FILE),
        stop=lambda: (activity.close(), supervisor.stop_all()),
        facts={"nginx": f"127.0.0.1:{port}", "postgres": public_dsn(dsn), "app": app_endpoints},
    )


def _wait_http(url: str, proc: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1):
            return True
        time.sleep(0.02)
    return False


class WebstackTarget:
    """``system.kind: webstack``: nginx -> the embedded application -> PostgreSQL."""

    kind = "webstack"
    faults = frozenset({"stall", "cpu_hog"})

    def check(self, system: SystemSpec) -> None:
        _check(system)

    def deploy(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> Deployment:
        return start_webstack(system, workdir, supervisor, hierarchy)

    def deployed_as(self, system: SystemSpec) -> dict[str, Any]:
        return quota_free(
            system, lambda name, spec: nginx_workers(spec) if name == "web" else processes_for(spec)
        )


register(WebstackTarget())
