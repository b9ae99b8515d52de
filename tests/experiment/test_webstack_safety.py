"""Safe by default, on the webstack: PostgreSQL answers only with the run's password, nginx's
workers do not run as root, and request ids are data in nginx's log too."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.experiment._support import ODD_IDS, as_recorded, require, send
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment
from tierscope.experiment.targets.webstack import INSTALL_HINT, missing_parts, start_webstack
from tierscope.spec.experiment import SystemSpec

pytestmark = [pytest.mark.real_system, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def webstack() -> Iterator[tuple[Deployment, Path]]:
    missing = missing_parts()
    if missing:
        require(", ".join(missing), INSTALL_HINT)
    # Like a run's scratch folder (pytest's own tmp_path is not reachable by other users).
    root = Path(tempfile.mkdtemp(prefix="tierscope-test-"))
    workdir = root / "s0"
    workdir.mkdir()
    sup = Supervisor(workdir)
    sup.start_reaper()
    try:
        dep = start_webstack(SystemSpec(kind="webstack", topology="1/1/1"), workdir, sup, None)
    except BaseException:
        sup.stop_all()
        sup.close()
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield dep, workdir
    finally:
        dep.stop()
        sup.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def no_saved_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", os.devnull)


def test_postgres_refuses_clients_without_the_runs_password(
    webstack: tuple[Deployment, Path], no_saved_password: None
) -> None:
    import psycopg

    dep, workdir = webstack
    port = dep.facts["postgres"].split("port=")[1].split()[0]
    assert "password" not in dep.facts["postgres"]  # what the run's events keep
    base = f"port={port} dbname=postgres user=postgres connect_timeout=5"
    for dsn in (
        f"host=127.0.0.1 {base}",
        f"host={workdir / 'pg'} {base}",  # the unix socket (root may enter its folder)
        f"host=127.0.0.1 {base} password=postgres",
    ):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(dsn).close()
    assert (workdir / "pg").stat().st_mode & 0o077 == 0  # other users cannot reach the socket
    # The app tier's credentials (in its private config file) do connect.
    cfg_file = workdir / "app-1.p0.json"
    assert cfg_file.stat().st_mode & 0o077 == 0
    with psycopg.connect(json.loads(cfg_file.read_text())["postgres"]) as conn:
        assert conn.execute("SELECT count(*) FROM categories").fetchone() == (20,)


def test_nginx_workers_do_not_run_as_root(webstack: tuple[Deployment, Path]) -> None:
    dep, _ = webstack
    (master,) = next(n for n in dep.nodes if n.tier == "web").pgids
    workers = [pid for pid in _children(master) if _comm(pid) == "nginx"]
    assert workers, "no nginx worker found"
    assert _uid(master) == 0
    assert all(_uid(pid) != 0 for pid in workers), [(p, _uid(p)) for p in workers]
    # The unprivileged workers still serve what they must read and proxy.
    for path in ("/static/logo.png", "/story?id=5"):
        with urllib.request.urlopen(dep.entry_urls[0] + path, timeout=10) as resp:
            assert resp.status == 200, path


def test_odd_request_ids_are_data_in_every_tier(webstack: tuple[Deployment, Path]) -> None:
    dep, _ = webstack
    # For nginx a bare line feed ends a header line: it reads b"new" there, not the same id.
    odd = [rid for rid in ODD_IDS if b"\n" not in rid]
    status = {rid: send(dep.entry_urls[0], rid) for rid in odd}
    passed = [rid for rid, line in status.items() if line == b"HTTP/1.1 200 OK"]
    # nginx itself refuses some (a NUL in a header); the others get through.
    assert len(passed) >= len(odd) - 2, status
    time.sleep(0.6)  # > nginx's access-log flush interval
    for tier, per_request in (("web", 1), ("app", 1), ("db", 2)):  # view_story: two queries
        sources = [s for n in dep.nodes if n.tier == tier for s in n.request_sources]
        got = pl.concat([s() for s in sources])["request_id"].to_list()
        for rid in passed:
            assert got.count(as_recorded(rid)) == per_request, (tier, rid[:40], status)
        assert all(s.skipped.count == 0 for s in sources), tier  # nothing lost as malformed


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])  # effective uid
    raise AssertionError(f"no Uid line for {pid}")
