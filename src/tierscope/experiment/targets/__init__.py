"""Systems under test that the runner deploys, checks and stops by itself.

A target turns a validated :class:`~tierscope.spec.experiment.SystemSpec` into a running
:class:`Deployment`: its nodes (one per tier replica, each in its own cgroup with its quota), the
URLs the load generator drives, the base workload that fits the system, and where each node's
request records and gauges are. Everything a target starts goes through the run's
:class:`~tierscope.experiment.processes.Supervisor`, so it is stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import polars as pl

from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.processes import Supervisor
from tierscope.spec.experiment import SystemSpec


@dataclass
class Node:
    """One tier replica."""

    tier: str
    name: str
    replica: int
    cgroup: NodeCgroup | None
    quota: float | None
    pgids: list[int] = field(default_factory=list)
    gauges: list[Path] = field(default_factory=list)
    #: Readers of this node's per-request records, each returning the rows added since its
    #: last call (columns request_id, interaction, start, end, status, detail; monotonic times).
    request_sources: list[Callable[[], pl.DataFrame]] = field(default_factory=list)
    extra_metrics: Callable[[], dict[str, float]] | None = None

    def pids(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.pids()
        return process_group_members(self.pgids)


@dataclass
class Deployment:
    nodes: list[Node]
    entry_urls: list[str]
    workload: dict[str, Any]
    stop: Callable[[], None]
    facts: dict[str, Any] = field(default_factory=dict)


def process_group_members(pgids: list[int]) -> list[int]:
    """Pids whose process group is one of ``pgids`` (a /proc scan; for nodes without cgroups)."""
    wanted = set(pgids)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) in wanted:
                out.append(int(entry))
    return out


class CsvTail:
    """Reads the rows appended to a tier's request log since the previous call."""

    SCHEMA: ClassVar[dict[str, pl.DataType]] = {
        "request_id": pl.String(),
        "interaction": pl.String(),
        "start": pl.Float64(),
        "end": pl.Float64(),
        "status": pl.String(),
        "detail": pl.String(),
    }

    def __init__(self, path: Path, *, header: bool = True) -> None:
        self.path = path
        self.offset = 0
        self.header = header

    def raw(self) -> bytes:
        """The complete lines added since the last call (a partial last line waits)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return b""
        if self.header and self.offset == 0:
            head = data.find(b"\n") + 1
            if head == 0:
                return b""
            data, self.offset = data[head:], head
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        return data[:cut]

    def raw_lines(self) -> list[str]:
        return self.raw().decode("utf-8", "replace").splitlines()

    def __call__(self) -> pl.DataFrame:
        data = self.raw()
        if not data:
            return pl.DataFrame(schema=self.SCHEMA)
        return pl.read_csv(
            data, has_header=False, new_columns=list(self.SCHEMA), schema=self.SCHEMA
        )


def deployed_as(system: SystemSpec) -> dict[str, Any]:
    """What decides how ``system`` is deployed: its spec with every tier's CPU quota replaced by
    the processes that quota starts. Two systems alike in this differ only in quotas, which can
    be changed on the running processes (:meth:`NodeCgroup.set_cpu`)."""
    from tierscope.experiment.targets.embedded import processes_for
    from tierscope.experiment.targets.webstack import nginx_workers

    doc = system.model_dump(mode="json")
    tiers = {}
    for name in ("web", "app", "db"):
        spec = system.tier(name)
        processes = (
            nginx_workers(spec)
            if system.kind == "webstack" and name == "web"
            else processes_for(spec)
        )
        tiers[name] = {**spec.model_dump(mode="json"), "cpu": None, "processes": processes}
    doc["tiers"] = tiers
    return doc


def start_system(
    system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
) -> Deployment:
    """Deploy ``system`` (embedded or webstack) and return it running and ready."""
    if system.kind == "webstack":
        from tierscope.experiment.targets.webstack import start_webstack

        return start_webstack(system, workdir, supervisor, hierarchy)
    from tierscope.experiment.targets.embedded import start_embedded

    return start_embedded(system, workdir, supervisor, hierarchy)
