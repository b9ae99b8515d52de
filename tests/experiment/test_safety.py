"""Safe by default, on the embedded system: no client string can break a run's tables, tiers
never import from the caller's working directory, the database tier answers only the run's app
tier, and the leftovers of a run killed with its reaper are removed by the next run (and only
those: never a live run's)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from tests.experiment._support import ODD_IDS, as_recorded, pids_naming, require, send
from tierscope.experiment.cgroups import CgroupUnavailableError, open_hierarchy
from tierscope.experiment.processes import StartError, Supervisor
from tierscope.experiment.targets import Deployment
from tierscope.experiment.targets.embedded import start_embedded
from tierscope.spec.experiment import SystemSpec, parse_experiment
from tierscope.store import read_run

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """The embedded system without cgroups (no root needed), in its own scratch folder."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    sup = Supervisor(scratch)
    sup.start_reaper()
    dep = start_embedded(SystemSpec(topology="1/1/1"), scratch, sup, None)
    try:
        yield dep
    finally:
        dep.stop()
        sup.close()


def records(dep: Deployment, tier: str) -> pl.DataFrame:
    time.sleep(0.5)  # > the request logs' flush interval
    return pl.concat([src() for n in dep.nodes if n.tier == tier for src in n.request_sources])


# ---- request ids are data ------------------------------------------------------------------------
def test_odd_request_ids_round_trip_through_every_tier(deployment: Deployment) -> None:
    for rid in ODD_IDS:
        assert send(deployment.entry_urls[0], rid) == b"HTTP/1.1 200 OK", rid
    want = [as_recorded(r) for r in ODD_IDS]
    for tier, per_request in (("web", 1), ("app", 1), ("db", 2)):  # view_story: two queries
        got = records(deployment, tier)["request_id"].to_list()
        for rid in want:
            assert got.count(rid) == per_request, (tier, rid[:40])
    assert all(
        src.skipped.count == 0 for n in deployment.nodes for src in n.request_sources
    )  # nothing was lost as malformed either


def test_a_line_that_is_not_a_record_is_skipped_and_counted(tmp_path: Path) -> None:
    from tierscope.experiment.embedded._instrument import RequestLog
    from tierscope.experiment.targets import CsvTail

    path = tmp_path / "tier.csv"
    log = RequestLog(path)
    log.record("first", "home", 1.0, 2.0, "ok")
    log.flush()
    with open(path, "ab") as fh:  # what a crash, a disk error or a foreign writer leaves
        fh.write(b"garbage\n" + b"x,home,1.0,not-a-time,ok,\n" + b"\xff,home,1,2,ok,\n")
    log.record('after "that"', "home", 3.0, 4.0, "ok", "q,1")
    log.close()
    tail = CsvTail(path)
    frame = tail()
    assert frame["request_id"].to_list() == ["first", 'after "that"']
    assert frame["detail"].to_list() == [None, "q,1"]
    assert frame["end"].to_list() == [2.0, 4.0]
    assert tail.skipped.take() == (3, repr(b"garbage"))


def test_odd_request_ids_and_a_corrupt_log_line_cost_no_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole run with a hand-written client sending odd ids at every level: every level keeps
    its point, the ids are in requests.parquet, a corrupt line is an event and a warning."""
    from tierscope.experiment import runner as runner_mod

    deployed: list[Deployment] = []
    real_start = runner_mod.start_system

    def start_and_keep(*args: Any, **kwargs: Any) -> Deployment:
        deployed.append(real_start(*args, **kwargs))
        return deployed[-1]

    monkeypatch.setattr(runner_mod, "start_system", start_and_keep)
    sent: set[float] = set()

    def progress(event: dict[str, Any]) -> None:
        if event.get("event") != "tick" or event["level"] in sent:
            return
        sent.add(event["level"])
        for rid in ODD_IDS:
            send(deployed[0].entry_urls[0], rid)
        if len(sent) == 1:
            app = next(n for n in deployed[0].nodes if n.tier == "app")
            with open(app.request_sources[0].path, "ab") as fh:  # type: ignore[attr-defined]
                fh.write(b"not,a,record\n")

    doc = {
        "name": "odd-ids",
        "system": {"kind": "embedded", "topology": "1/1/1"},
        "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": 0.2}},
        "sweep": {"levels": [3, 6], "repetitions": 1},
        "phases": {"ramp_up": 0.5, "steady": 1.5, "ramp_down": 0.2},
    }
    out = tmp_path / "run"
    summary = runner_mod.run_experiment(parse_experiment(doc), doc, out, progress=progress)
    assert summary["status"] == "complete"
    run = read_run(out)
    assert run.points["level"].to_list() == [3.0, 6.0]
    assert sent == {3.0, 6.0}
    for tier in ("web", "app", "db"):
        ids = set(run.requests.filter(pl.col("tier") == tier)["request_id"].to_list())
        assert {as_recorded(r) for r in ODD_IDS} <= ids, tier
    skipped = run.events.filter(pl.col("kind") == "skipped_records")
    assert skipped.height == 1 and skipped["tier"][0] == "app"
    assert json.loads(skipped["detail"][0])["lines"] == 1
    assert [w for w in summary["warnings"] if "request log" in w] == [
        "setup s0, level 3: skipped 1 line of app-1's request log that was not a record "
        "(first: b'not,a,record')"
    ]


# ---- tiers start isolated ------------------------------------------------------------------------
#: Modules a tier imports, planted in the caller's working directory: each leaves a mark.
PLANTED = ("tierscope", "json", "asyncio", "sqlite3", "socket", "polars")


def test_tiers_never_import_from_the_callers_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd, marks, scratch = tmp_path / "cwd", tmp_path / "marks", tmp_path / "scratch"
    for d in (cwd, marks, scratch):
        d.mkdir()
    for name in PLANTED:
        (cwd / f"{name}.py").write_text(f"open({str(marks / name)!r}, 'w').close()\n")
    monkeypatch.chdir(cwd)
    sup = Supervisor(scratch)
    sup.start_reaper()
    dep = None
    try:
        dep = start_embedded(SystemSpec(topology="1/1/1"), scratch, sup, None)
        assert send(dep.entry_urls[0], b"iso") == b"HTTP/1.1 200 OK"
        cwds = {os.readlink(f"/proc/{pid}/cwd") for n in dep.nodes for pid in n.pgids}
    except StartError as exc:  # a planted module broke a tier: it was imported
        cwds = {f"did not start: {str(exc)[:300]}"}
    finally:
        if dep is not None:
            dep.stop()
        sup.close()
    assert sorted(p.name for p in marks.iterdir()) == [], "imported from the caller's cwd"
    assert cwds == {str(scratch.resolve())}  # a working directory of their own


def test_isolated_python_keeps_the_runners_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the runner imports (here a folder put on its path, as PYTHONPATH would) a tier
    imports too; the working directory is left out even when it is on the runner's path."""
    from tierscope.experiment.processes import python_argv

    lib, cwd = tmp_path / "lib", tmp_path / "cwd"
    for d, where in ((lib, "lib"), (cwd, "cwd")):
        d.mkdir()
        (d / "tierscope_probe.py").write_text(
            f"import sys\nopen(sys.argv[1], 'w').write({where!r})\n"
        )
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(cwd))  # as `python -m` puts it first
    monkeypatch.chdir(cwd)
    out = tmp_path / "out"
    subprocess.run(python_argv("tierscope_probe", str(out)), check=True, timeout=60)
    assert out.read_text() == "lib"


# ---- the database tier answers the run's app tier only -------------------------------------------
def db_exchange(port: int, lines: list[dict[str, Any]], answers: int) -> list[Any]:
    """Send JSON lines to a db replica; read ``answers`` answers, then ``"closed"`` if the
    replica closed the connection after them."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"".join(json.dumps(x).encode() + b"\n" for x in lines))
        reader = s.makefile("rb")
        out: list[Any] = []
        while len(out) < answers and (line := reader.readline()):
            out.append(json.loads(line))
        s.settimeout(0.5)
        try:
            if reader.readline() == b"":
                out.append("closed")
        except TimeoutError:
            pass  # still open
        reader.close()
    return out


def test_db_tier_refuses_clients_without_the_runs_token(deployment: Deployment) -> None:
    port = int(deployment.facts["endpoints"]["db"][0].rsplit(":", 1)[1])
    query = {"r": "intruder", "i": "home", "q": "categories", "a": [], "w": 1}
    write = {"r": "intruder", "i": "rate_comment", "q": "rate_user", "a": [99, 1], "w": 1}
    refused = [{"error": "authentication required"}, "closed"]
    for hello in ([], [{"auth": "not-the-token"}], [{"auth": None}], [{"r": "x"}]):
        assert db_exchange(port, [*hello, query, write], answers=2) == refused, hello
    # The run's own token works: the refusals above are not a broken server.
    scratch = Path(deployment.nodes[0].gauges[0]).parent
    token = json.loads((scratch / "db-1.p0.json").read_text())["token"]
    (answer,) = db_exchange(port, [{"auth": token}, {**query, "r": "owner"}], answers=1)
    assert len(answer["rows"]) == 20  # the seeded categories
    ids = records(deployment, "db")["request_id"].to_list()
    assert "intruder" not in ids and "owner" in ids  # nothing ran for the intruders
    cfg_files = list(scratch.glob("*.p0.json"))
    assert len(cfg_files) == 3  # the token is in config files that only their owner reads
    assert all(f.stat().st_mode & 0o077 == 0 for f in cfg_files)


# ---- leftovers of runs killed with their reaper --------------------------------------------------
def cgroups_or_skip() -> None:
    try:
        h = open_hierarchy(f"tierscope-test-{secrets.token_hex(3)}")
    except CgroupUnavailableError as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")
    h.remove()


def cgroup_dirs(run_id: str) -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").glob(f"**/tierscope-{run_id}"))


def test_leftovers_of_a_dead_run_are_removed_and_a_live_runs_are_kept(tmp_path: Path) -> None:
    from tierscope.experiment.leftovers import claim_run

    cgroups_or_skip()
    dead, live = secrets.token_hex(4), secrets.token_hex(4)
    # The live run holds its lock in another process, like a runner, and has a cgroup and folder.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path\n"
            "from tierscope.experiment.leftovers import claim_run\n"
            f"c = claim_run({live!r}, tmp=Path({str(tmp_path)!r}), mounts=[])\n"
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    h_live = h_dead = orphan = None
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        (tmp_path / f"tierscope-{live}-a1b2").mkdir()
        h_live = open_hierarchy(f"tierscope-{live}")
        h_live.node("app-1")
        # The dead run: its lock file (nobody holds it), scratch folder, and three cgroups (the
        # run's and two nodes'), one of them with a process that outlived it.
        probe = subprocess.Popen(["true"])  # its pid: a runner that no longer runs
        probe.wait()
        dead_pid = probe.pid
        (tmp_path / f"tierscope-{dead}.lock").write_text(json.dumps({"pid": dead_pid}))
        (tmp_path / f"tierscope-{dead}-x1y2").mkdir()
        (tmp_path / f"tierscope-{dead}-x1y2" / "reaper.state").write_text("{}\n")
        h_dead = open_hierarchy(f"tierscope-{dead}")
        h_dead.node("web-1")
        orphan_node = h_dead.node("db-1")
        orphan = subprocess.Popen(orphan_node.wrap(["sleep", "60"]), start_new_session=True)
        deadline = time.monotonic() + 10
        while not orphan_node.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert orphan_node.pids() == [orphan.pid]

        with claim_run(secrets.token_hex(4), tmp=tmp_path) as claim:
            (removed,) = claim.removed
        assert removed.run_id == dead and removed.pid == dead_pid
        assert removed.cgroups == 3 and removed.folders == 1 and removed.processes == 1
        assert not removed.failed
        assert removed.message() == (
            "stopped 1 process, removed 3 stale cgroups and 1 scratch folder of a killed run "
            f"({dead}, pid {dead_pid})"
        )
        assert cgroup_dirs(dead) == []
        assert not (tmp_path / f"tierscope-{dead}-x1y2").exists()
        assert not (tmp_path / f"tierscope-{dead}.lock").exists()
        assert orphan.wait(10) == -signal.SIGKILL
        # The live run's cgroups, folder and lock are untouched.
        assert len(cgroup_dirs(live)) == len(h_live.roots)
        assert all((root / "app-1").is_dir() for root in h_live.roots.values())
        assert (tmp_path / f"tierscope-{live}-a1b2").is_dir()
        assert (tmp_path / f"tierscope-{live}.lock").is_file()
    finally:
        holder.communicate(b"", timeout=30)
        if orphan is not None and orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        for h in (h_dead, h_live):
            if h is not None:
                h.remove()


def test_next_run_removes_what_a_run_killed_with_its_reaper_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run killed outright, runner, reaper and servers at once (nothing can clean up):
    its cgroups and scratch folder stay; the next run removes them and says so."""
    from tierscope.experiment import run_experiment
    from tierscope.experiment.leftovers import remove_leftovers

    cgroups_or_skip()
    spec = tmp_path / "spec.yaml"
    doc = {
        "name": "killed",
        "system": {"kind": "embedded", "topology": "1/1/1"},
        "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": 0.3}},
        "sweep": {"levels": [5], "repetitions": 1},
        "phases": {"ramp_up": 0.5, "steady": 30, "ramp_down": 0.2},
    }
    spec.write_text(yaml.safe_dump(doc))
    runs = tmp_path / "tmp"  # both runs' TMPDIR: their locks and scratch folders go there
    runs.mkdir()
    runner = subprocess.Popen(
        [sys.executable, "-m", "tierscope.cli", "run", str(spec), "--out", str(tmp_path / "r")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(runs)},
        start_new_session=True,
    )
    try:
        state = wait_for_servers(runs, count=3)
        run_id = state.parent.name.split("-")[1]
        pgids = [json.loads(x)["pgid"] for x in state.read_text().splitlines() if "pgid" in x]
        reaper = pids_naming(str(state))
        assert len(reaper) == 1
        for pid in [*reaper, runner.pid]:  # the reaper first: it must not get to clean
            os.kill(pid, signal.SIGKILL)
        for pgid in pgids:
            os.killpg(pgid, signal.SIGKILL)
        runner.wait(10)
        time.sleep(0.5)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    assert cgroup_dirs(run_id) and state.parent.is_dir()  # nothing cleaned up: the case at hand

    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    doc = {**doc, "phases": {"ramp_up": 0.2, "steady": 0.5, "ramp_down": 0.1}}
    try:
        summary = run_experiment(parse_experiment(doc), doc, tmp_path / "next")
    finally:
        remove_leftovers(tmp=runs)  # whatever happened, leave no cgroups behind
    said = (
        f"removed 4 stale cgroups and 1 scratch folder of a killed run ({run_id}, pid {runner.pid})"
    )
    assert summary["warnings"][0] == said
    (event,) = read_run(tmp_path / "next").events.filter(pl.col("kind") == "cleanup").rows()
    assert json.loads(event[-1])["cgroups"] == 4
    assert cgroup_dirs(run_id) == []
    assert sorted(p.name for p in runs.iterdir()) == []  # the next run's own are gone too


def wait_for_servers(tmp: Path, count: int, timeout_s: float = 60) -> Path:
    """The reaper state file of the run in ``tmp`` once ``count`` servers are noted in it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for state in tmp.glob("tierscope-*-*/reaper.state"):
            if state.read_text().count('"pgid"') >= count:
                time.sleep(0.5)  # the last one's ready file, and the first level under way
                return state
        time.sleep(0.05)
    raise AssertionError(f"no run with {count} servers in {tmp}: {list(tmp.iterdir())}")


def test_the_reaper_kills_a_group_only_while_its_id_is_the_runs(tmp_path: Path) -> None:
    """Process group ids come back within minutes on a busy host (pid_max 32768 here): a group
    recorded by a run is killed only if its leader is the process the run started."""
    from tierscope.experiment._reaper import clean, start_time

    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # someone else's group
    try:
        started = start_time(other.pid)
        assert started is not None
        state = tmp_path / "reaper.state"
        state.write_text(json.dumps({"pgid": other.pid, "start": started - 1}) + "\n")
        clean(state)  # the run's group of that id started earlier: this one is not it
        time.sleep(0.2)
        assert other.poll() is None
        state.write_text(json.dumps({"pgid": other.pid, "start": started}) + "\n")
        clean(state)
        assert other.wait(5) == -signal.SIGKILL
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
