"""Systems under test: the :class:`Target` protocol, its registry, and what deployments share.

A target turns a validated :class:`~tierscope.spec.experiment.SystemSpec` of its ``kind`` into
a running :class:`Deployment`: its nodes (one per component replica, each with the processes
and cgroup the monitor watches and faults act on, and its gauge and request-record sources),
the URLs the load generator drives, the base workload that fits the system, the faults it
supports, ``scale`` and teardown. Targets register themselves by kind (:func:`register`);
:func:`target_for` finds one. ``embedded`` (any call graph, or the three-tier shorthand) and
``webstack`` (nginx -> app -> PostgreSQL) start what they run through the run's
:class:`~tierscope.experiment.processes.Supervisor`, so it is stopped whatever happens;
``attach`` watches and drives a system that is already running and never starts, changes or
stops any of it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import polars as pl

from tierscope.errors import InputError, TierscopeError
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.embedded._instrument import decode_field
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
    #: Where the node's processes are found without a cgroup, when not by process groups
    #: (an attached component named by PID or command line).
    pid_source: Callable[[], list[int]] | None = None

    def pids(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.pids()
        if self.pid_source is not None:
            return self.pid_source()
        return process_group_members(self.pgids)

    @property
    def adopted(self) -> bool:
        """Its processes were running before the run and are not tierscope's to change."""
        return self.pid_source is not None or (self.cgroup is not None and self.cgroup.adopted)


@dataclass
class Deployment:
    """A deployed system: its nodes front to back, where the load enters, the base workload,
    what scales it (None: it cannot change replicas while running) and what stops it
    (teardown); the faults it supports are its target's (:attr:`Target.faults`)."""

    nodes: list[Node]
    entry_urls: list[str]
    workload: dict[str, Any]
    stop: Callable[[], None]
    facts: dict[str, Any] = field(default_factory=dict)
    scaler: Callable[[str, int], None] | None = None

    @property
    def components(self) -> list[str]:
        return list(dict.fromkeys(n.tier for n in self.nodes))

    def scale(self, component: str, replicas: int) -> None:
        """Run ``replicas`` replicas of ``component`` from now on."""
        if component not in self.components:
            raise InputError("component", component, "one of " + ", ".join(self.components))
        if self.scaler is None:
            raise TierscopeError("this system cannot change its replicas while it runs")
        self.scaler(component, replicas)


class Target(Protocol):
    """A kind of system (``system.kind``) the runner can deploy."""

    kind: str
    #: the fault kinds it can inject (``faults[].kind``)
    faults: frozenset[str]

    def check(self, system: SystemSpec) -> None:
        """Refuse (InputError/SpecError naming the field) what cannot be deployed here, before
        anything is created."""

    def deploy(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> Deployment:
        """``system`` running and ready (what it starts goes through ``supervisor``)."""
        ...

    def deployed_as(self, system: SystemSpec) -> dict[str, Any]:
        """What decides how ``system`` is deployed: two systems alike in this differ only in
        what can be changed on the running system (CPU quotas)."""
        ...


TARGETS: dict[str, Target] = {}
#: Where the built-in targets live (imported when first asked for).
BUILT_IN = {
    "embedded": "tierscope.experiment.targets.embedded",
    "webstack": "tierscope.experiment.targets.webstack",
    "attach": "tierscope.experiment.targets.attach",
}


def register(target: Target) -> Target:
    """Make ``target`` the one for its ``kind`` (a plug-in may add kinds)."""
    TARGETS[target.kind] = target
    return target


def target_for(kind: str) -> Target:
    if kind not in TARGETS and kind in BUILT_IN:
        importlib.import_module(BUILT_IN[kind])
    try:
        return TARGETS[kind]
    except KeyError:
        known = sorted({*TARGETS, *BUILT_IN})
        raise InputError("system.kind", kind, "one of " + ", ".join(known)) from None


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
    """Reads the rows appended to a tier's request log since the previous call.

    A line that is not a record (wrong number of fields, a time that is not a number, bytes that
    are not UTF-8, a bad escape) is skipped and counted in :attr:`skipped`, never an error: the
    log holds what clients sent, and no single request may fail a run. The text fields are
    decoded as :class:`~tierscope.experiment.embedded._instrument.RequestLog` encoded them.
    """

    SCHEMA: ClassVar[dict[str, pl.DataType]] = {
        "request_id": pl.String(),
        "interaction": pl.String(),
        "start": pl.Float64(),
        "end": pl.Float64(),
        "status": pl.String(),
        "detail": pl.String(),
    }
    TEXT = ("request_id", "interaction", "status", "detail")

    def __init__(self, path: Path, *, header: bool = True) -> None:
        self.path = path
        self.offset = 0
        self.header = header
        self.skipped = Skipped()

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
        try:
            frame = pl.read_csv(
                data,
                has_header=False,
                new_columns=list(self.SCHEMA),
                schema=self.SCHEMA,
                quote_char=None,
            )
            ok = frame.select(
                pl.col("start").is_not_null()
                & pl.col("end").is_not_null()
                & pl.col("status").is_not_null()
            ).to_series()
            if not ok.all() or frame.height != data.count(b"\n"):
                raise ValueError("a line is not a record")
            frame = self._decoded(frame)
        except (pl.exceptions.PolarsError, ValueError):
            frame = self._by_line(data)  # rare: keep every good line, count the others
        return frame

    def _decoded(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Encoded fields decoded (ValueError for a bad escape); most logs have none."""
        for c in self.TEXT:
            if frame[c].str.contains("%", literal=True).any():
                values = [None if v is None else decode_field(v) for v in frame[c].to_list()]
                frame = frame.with_columns(pl.Series(c, values, dtype=pl.String))
        return frame

    def _by_line(self, data: bytes) -> pl.DataFrame:
        rows = []
        for line in data.split(b"\n")[:-1]:  # raw() returns whole lines only
            try:
                rid, interaction, start, end, status, detail = line.decode("utf-8").split(",")
                if not status:
                    raise ValueError("no status")
                rows.append(
                    (
                        decode_field(rid) or None,
                        decode_field(interaction) or None,
                        float(start),
                        float(end),
                        decode_field(status),
                        decode_field(detail) or None,
                    )
                )
            except ValueError:  # wrong field count, a bad number, UTF-8 or escape
                self.skipped.add(line)
        return pl.DataFrame(rows, schema=self.SCHEMA, orient="row")


class VisitTail(CsvTail):
    """A call-graph component's request log: each record's ``detail`` holds ``VISIT PARENT``
    (see :mod:`tierscope.experiment.embedded.component`), returned as the columns ``visit`` and
    ``parent`` (null at the entry)."""

    def __call__(self) -> pl.DataFrame:
        frame = super().__call__()
        parts = frame["detail"].fill_null("").str.split_exact(" ", 1)
        return frame.with_columns(
            parts.struct.field("field_0").replace("", None).alias("visit"),
            parts.struct.field("field_1").replace("", None).alias("parent"),
            pl.lit(None, pl.String).alias("detail"),
        )


class Skipped:
    """Lines of a request log that were not records: how many, and the first one (shortened)."""

    EXAMPLE_CHARS = 200

    def __init__(self) -> None:
        self.count = 0
        self.example: str | None = None

    def add(self, line: bytes) -> None:
        self.count += 1
        if self.example is None:
            self.example = repr(line[: self.EXAMPLE_CHARS])

    def take(self) -> tuple[int, str | None]:
        """The count and example so far, and start counting anew."""
        out = (self.count, self.example)
        self.count, self.example = 0, None
        return out


def skipped_records(node: Node) -> list[dict[str, Any]]:
    """What each of ``node``'s request logs skipped since the last call, for the run's events."""
    out = []
    for source in node.request_sources:
        skipped = getattr(source, "skipped", None)
        if isinstance(skipped, Skipped) and skipped.count:
            count, example = skipped.take()
            out.append({"node": node.name, "lines": count, "example": example})
    return out


def deployed_as(system: SystemSpec) -> dict[str, Any]:
    return target_for(system.kind).deployed_as(system)


def start_system(
    system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
) -> Deployment:
    """Deploy ``system`` with the target of its kind and return it running and ready."""
    return target_for(system.kind).deploy(system, workdir, supervisor, hierarchy)
