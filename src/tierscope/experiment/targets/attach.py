"""``system.kind: attach``: watch and drive a system that is already running.

Each component is located by exactly one of

* ``pid``: its process ids (their descendants are the component's too: an nginx master's
  workers, a PostgreSQL postmaster's backends);
* ``match``: a regular expression searched in every process's command line (arguments joined
  by spaces; tierscope's own process and its ancestors never match);
* ``cgroup``: its cgroup path, relative to the hierarchy's root or absolute under its mount;
* ``container``: a Docker/Podman/CRI container id (or its first hex digits), whose cgroup is
  looked up.

The monitor samples each component at the run's interval from its cgroup (CPU, throttling,
memory, I/O) or, without one, from /proc for its processes (found again once a second, so
processes that come and go are followed). The load generator drives the entry's ``url``. A
component's CPU limit is ``cpu`` where the spec gives it, else its cgroup's own quota; without
either, ``cpu_util`` is of the host's cores, and the deploy event says so.

Design decision: tierscope never starts, reconfigures or stops anything here. It writes to no
file of the system and no cgroup of it; faults go only where the spec opts in
(``allow_faults``): a stall is SIGSTOP/SIGCONT of the component's processes (continued whatever
happens), a CPU hog is a busy process of tierscope's own put into the component's cgroup and
killed at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any

from tierscope.errors import SpecError
from tierscope.experiment.cgroups import (
    CgroupUnavailableError,
    Hierarchy,
    NodeCgroup,
    container_cgroup,
)
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment, Node, register
from tierscope.spec.experiment import ComponentSpec, SystemSpec

#: The base workload: GET the entry's URL.
ATTACH_WORKLOAD: dict[str, Any] = {
    "name": "attach",
    "mode": "closed",
    "think_time": {"dist": "exp", "mean": 0.5},
    "interactions": [{"name": "visit", "method": "GET", "url": "/"}],
}
REFRESH_S = 1.0


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process now."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            out[int(entry)] = (ppid, cmd)
    return out


def _with_descendants(roots: set[int], table: dict[int, tuple[int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [p for p in roots if p in table]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def _ours(table: dict[int, tuple[int, str]]) -> set[int]:
    """This process and its ancestors (the shell or test that started the run, whose command
    line may well contain the pattern): never part of an attached component."""
    up: set[int] = set()
    pid = os.getpid()
    while pid in table and pid not in up:
        up.add(pid)
        pid = table[pid][0]
    return up


class ProcessFinder:
    """The processes of a component located by ``pid`` or ``match``, found again at most once
    every ``refresh_s`` (a /proc scan)."""

    def __init__(
        self, pids: list[int] | None, pattern: str | None, refresh_s: float = REFRESH_S
    ) -> None:
        self.roots = set(pids or [])
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.refresh_s = refresh_s
        self.found: list[int] = []
        self.at = -1e18

    def find(self) -> list[int]:
        table = _processes()
        if self.pattern is not None:
            ours = _ours(table)
            hit = self.pattern.search
            roots = {p for p, (_, cmd) in table.items() if p not in ours and hit(cmd)}
        else:
            roots = self.roots
        return sorted(_with_descendants(roots, table))

    def __call__(self) -> list[int]:
        now = time.monotonic()
        if now - self.at >= self.refresh_s:
            self.found, self.at = self.find(), now
        return self.found


def locate(spec: ComponentSpec) -> tuple[NodeCgroup | None, ProcessFinder | None, str]:
    """(cgroup, processes, where) of a component; ValueError naming the problem."""
    if spec.pid:
        table = _processes()
        missing = [p for p in spec.pid if p not in table]
        if missing:
            raise ValueError(f"no process {', '.join(map(str, missing))} is running")
        return None, ProcessFinder(spec.pid, None), "pid " + ",".join(map(str, spec.pid))
    if spec.match is not None:
        finder = ProcessFinder(None, spec.match)
        if not finder.find():
            raise ValueError(f"no running process's command line matches {spec.match!r}")
        return None, finder, f"processes matching {spec.match!r}"
    try:
        path = spec.cgroup if spec.cgroup is not None else container_cgroup(str(spec.container))
        cgroup = NodeCgroup.adopt(path)
    except CgroupUnavailableError as exc:
        raise ValueError(str(exc)) from None
    return cgroup, None, f"cgroup {path}"


def _reachable(url: str, timeout_s: float = 2.0) -> str | None:
    """None if something accepts TCP connections at ``url``'s host and port, else why not."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((u.hostname, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"nothing accepts connections at {u.hostname}:{port} ({exc.strerror or exc})"


class AttachTarget:
    kind = "attach"
    faults = frozenset({"stall", "cpu_hog"})

    def check(self, system: SystemSpec) -> None:
        problems = []
        for name, spec in (system.components or {}).items():
            field = f"system.components.{name}.{spec.located[0]}"
            try:
                locate(spec)
            except ValueError as exc:
                problems.append((field, str(exc)))
            if spec.url is not None and (why := _reachable(spec.url)) is not None:
                problems.append((f"system.components.{name}.url", why))
        if problems:
            raise SpecError("system", problems)

    def deploy(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> Deployment:
        assert system.components is not None
        nodes, facts = [], {}
        for comp in system.graph.components:
            spec = system.components[comp.name]
            try:
                cgroup, finder, where = locate(spec)
            except ValueError as exc:  # gone since the check
                raise SpecError(
                    "system", [(f"system.components.{comp.name}.{spec.located[0]}", str(exc))]
                ) from None
            quota = spec.cpu or (cgroup.cpu_quota_cores if cgroup is not None else None)
            source = "spec" if spec.cpu else "cgroup" if quota else "none: cpu_util of host cores"
            nodes.append(
                Node(
                    tier=comp.name,
                    name=f"{comp.name}-1",
                    replica=1,
                    cgroup=cgroup,
                    quota=quota,
                    pid_source=finder,
                )
            )
            facts[comp.name] = {"where": where, "cpu": quota, "cpu_from": source}
        url = urllib.parse.urlsplit(str(system.components[system.entry_component].url))
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        workload = {
            **ATTACH_WORKLOAD,
            "interactions": [{"name": "visit", "method": "GET", "url": target}],
        }
        return Deployment(
            nodes=nodes,
            entry_urls=[f"{url.scheme}://{url.netloc}"],
            workload=workload,
            stop=lambda: None,  # nothing of the system is tierscope's to stop
            facts={"attached": facts},
        )

    def deployed_as(self, system: SystemSpec) -> dict[str, Any]:
        return system.model_dump(mode="json")


register(AttachTarget())
