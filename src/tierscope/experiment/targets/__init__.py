"""Systems under test: the :class:`Target` protocol, its registry, and what deployments share.

A target turns a validated :class:`~tierscope.spec.experiment.SystemSpec` of its ``kind`` into
a running :class:`Deployment`: its nodes (one per component replica, each with the processes
and cgroup the monitor watches and faults act on, and its gauge and request-record sources),
the URLs the load generator drives, the base workload that fits the system, the faults it
supports, ``scale`` (through the target's :class:`Scaler`, where it has one) and teardown.
Targets register themselves by kind (:func:`register`); :func:`target_for` finds one.
``embedded`` (any call graph, or the three-tier shorthand; a call graph scales while it runs)
and ``webstack`` (nginx -> app -> PostgreSQL) start what they run through the run's
:class:`~tierscope.experiment.processes.Supervisor`, so it is stopped whatever happens;
``attach`` watches and drives a system that is already running and never starts, changes or
stops any of it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import polars as pl

from tierscope.errors import InputError, TierscopeError
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.embedded._instrument import decode_field
from tierscope.experiment.netem import LinkFault
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


@dataclass(frozen=True)
class Scaled:
    """A change of a component's replicas: the nodes started, or those stopped; ``asked``:
    when it was asked for (``time.monotonic``); it is done when the listeners hear of it."""

    component: str
    asked: float
    added: tuple[Node, ...] = ()
    removed: tuple[Node, ...] = ()


class Scaler(Protocol):
    """How a deployment changes a component's replicas while it runs."""

    def add(self, component: str, count: int) -> list[Node]:
        """Start ``count`` more replicas, ready and serving (callers rebalance to them)."""
        ...

    def drain(self, nodes: list[Node]) -> None:
        """Send no more work to ``nodes`` and wait for what they hold to finish."""
        ...

    def stop(self, nodes: list[Node]) -> None:
        """Stop drained nodes' processes and remove their cgroups."""
        ...


class LoadDriver(Protocol):
    """How load is offered to a deployment: its workload schema and its generator."""

    def workload(self, doc: dict[str, Any], source: str) -> Any:
        """``doc`` validated (SpecError naming ``source`` and the field)."""
        ...

    def generator(self, workload: Any, *, seed: int, request_id_prefix: str) -> Any:
        """A load generator for ``workload``: ``start(level, ramp_up, steady, ramp_down,
        setup=, rep=)`` returns a handle as :class:`tierscope.load.LoadGenerator`'s does."""
        ...

    def prepare(self, workload: Any) -> dict[str, Any]:
        """Make the system ready for ``workload`` before its first level (a database's records
        loaded); what it did, for the run's events (empty: nothing to do)."""
        ...


@dataclass
class HttpDriver:
    """The HTTP load generator on the deployment's entry URLs (every target but kafka)."""

    entry_urls: list[str]

    def workload(self, doc: dict[str, Any], source: str) -> Any:
        from tierscope.spec.workload import parse_workload

        return parse_workload(doc, source=source)

    def generator(self, workload: Any, *, seed: int, request_id_prefix: str) -> Any:
        from tierscope.load import LoadGenerator

        return LoadGenerator(
            workload, self.entry_urls, seed=seed, request_id_prefix=request_id_prefix
        )

    def prepare(self, workload: Any) -> dict[str, Any]:
        return {}


@dataclass
class Deployment:
    """A deployed system: its nodes front to back, where the load enters, the base workload,
    what scales it (None: it cannot change replicas while running) and what stops it
    (teardown); the faults it supports are its target's (:attr:`Target.faults`).

    ``listeners`` hear of every change of replicas (the runner's monitor follows them);
    ``retired`` keeps the nodes stopped by a scale-down until their last request records
    are collected (:meth:`collect_retired`)."""

    nodes: list[Node]
    entry_urls: list[str]
    workload: dict[str, Any]
    stop: Callable[[], None]
    facts: dict[str, Any] = field(default_factory=dict)
    scaler: Scaler | None = None
    listeners: list[Callable[[Scaled], None]] = field(default_factory=list)
    retired: list[Node] = field(default_factory=list)
    #: how load is offered (None: the HTTP load generator on ``entry_urls``)
    load_driver: LoadDriver | None = None
    #: the packet flows of a named network link (None: the system has no links to fault)
    links: Callable[[str], list[LinkFault]] | None = None

    @property
    def driver(self) -> LoadDriver:
        return self.load_driver or HttpDriver(self.entry_urls)

    @property
    def components(self) -> list[str]:
        return list(dict.fromkeys(n.tier for n in self.nodes))

    def replicas(self, component: str) -> list[Node]:
        return [n for n in self.nodes if n.tier == component]

    def scale(self, component: str, replicas: int) -> Scaled:
        """Run ``replicas`` replicas of ``component`` from now on: new ones start and their
        callers rebalance to them; the last ones drain (no new work, what they hold finishes),
        then stop. Returns what changed."""
        if component not in self.components:
            raise InputError("component", component, "one of " + ", ".join(self.components))
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise InputError("replicas", replicas, "a whole number of replicas >= 1")
        if self.scaler is None:
            raise TierscopeError("this system cannot change its replicas while it runs")
        current, asked = self.replicas(component), time.monotonic()
        if replicas > len(current):
            added = self.scaler.add(component, replicas - len(current))
            for node in added:  # the quota its siblings run with now (setups switch quotas)
                if node.cgroup is not None and node.quota != current[-1].quota:
                    node.cgroup.set_cpu(current[-1].quota)
                    node.quota = current[-1].quota
            at = next(i for i, n in enumerate(self.nodes) if n is current[-1]) + 1
            self.nodes[at:at] = added
            change = Scaled(component, asked, added=tuple(added))
        elif replicas < len(current):
            removed = current[replicas:]
            self.scaler.drain(removed)
            self.nodes = [n for n in self.nodes if all(n is not r for r in removed)]
            self.retired.extend(removed)
            change = Scaled(component, asked, removed=tuple(removed))
        else:
            return Scaled(component, asked)
        for listener in self.listeners:
            listener(change)
        if change.removed:
            self.scaler.stop(list(change.removed))
        return change

    def collect_retired(self) -> list[Node]:
        """The nodes stopped since the last call (their records are still to be read)."""
        out, self.retired = self.retired, []
        return out


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
    "kafka": "tierscope.experiment.targets.kafka",
    "cassandra": "tierscope.experiment.targets.cassandra",
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
