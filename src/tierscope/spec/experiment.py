"""Schema of the experiment spec (``tierscope run SPEC.yaml``) and its command-line overrides.

Design decisions:

* The documented field names (``system.kind``, ``system.topology``, ``system.tiers.<tier>.cpu``,
  ``workload``, ``sweep.levels``, ``sweep.repetitions``, ``phases``, ``monitor.interval``,
  ``faults``) are a contract; fields are added, never renamed.
* ``--set path.to.field=value`` edits the *document* before validation (the value is read as
  YAML, so ``0.15``, ``true`` and ``[10, 20]`` mean what they look like), so an override is checked
  by exactly the same rules as the file and a wrong path is reported by its location.
* Setups (named variants, ``sweep.setups``) are overrides too: each setup's spec is the base
  document with its ``set`` applied, validated on its own, so a setup can change anything.
* ``workload`` is kept as a document here and validated by the load generator's schema
  (:mod:`tierscope.spec.workload`) after it is merged over the system's base workload.
"""

from __future__ import annotations

import copy
import math
import os
import re
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tierscope.errors import TEXT_CHARS, SpecError, clip
from tierscope.spec._load import MAX_DEPTH, load_yaml, shape_problem
from tierscope.spec._types import (
    Integer,
    NonNegFloat,
    NonNegInt,
    PositiveFloat,
    PositiveInt,
    Probability,
)
from tierscope.spec.cassandra import CassandraWorkload, KeyspaceSpec
from tierscope.spec.graph import (
    MAX_COMPONENTS,
    NAME,
    THREE_TIERS,
    Call,
    Component,
    Graph,
    cycle,
)
from tierscope.spec.kafka import (
    ControlSpec,
    DelaySpec,
    KafkaWorkload,
    LossSpec,
    TopicSpec,
    grid_problem,
    link_problem,
)

_STRICT = ConfigDict(extra="forbid", frozen=True)
TIERS = THREE_TIERS
#: The server kinds: their one component and the field that counts its replicas.
SERVERS = {"kafka": ("broker", "brokers"), "cassandra": ("node", "nodes")}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_bytes(value: Any) -> int:
    """``268435456``, ``"256M"``, ``"1.5GiB"`` -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"expected a size such as 256M or 1G, got {value!r}")
    scale = 1024 ** " kmgt".index((m.group(2) or " ").lower())
    return int(float(m.group(1)) * scale)


def parse_cpus(text: str) -> set[int]:
    """``"0-1,3"`` -> {0, 1, 3}; ValueError for anything else (``"3-1"``, ``"a"``)."""
    cpus: set[int] = set()
    spec = text.replace(" ", "")
    if not re.fullmatch(r"\d{1,6}(-\d{1,6})?(,\d{1,6}(-\d{1,6})?)*", spec):
        raise ValueError(f"expected CPUs such as '1' or '0-1,3', got {text!r}")
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"expected CPU ranges low-high such as '0-3', got {text!r}")
        cpus.update(range(first, last + 1))
    return cpus


def host_cpus() -> set[int]:
    """The CPUs this process may run on (those a cpuset can name)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        try:
            return parse_cpus(Path("/sys/devices/system/cpu/online").read_text().strip())
        except (OSError, ValueError):
            return set(range(os.cpu_count() or 1))


def host_memory() -> int | None:
    """Bytes of physical memory of this host (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def _cpu_list(cpus: set[int]) -> str:
    runs: list[str] = []
    for c in sorted(cpus):
        if runs and runs[-1].split("-")[-1] == str(c - 1):
            runs[-1] = f"{runs[-1].split('-')[0]}-{c}"
        else:
            runs.append(str(c))
    return ",".join(runs)


def check_host(spec: ExperimentSpec, *, source: str) -> None:
    """Refuse limits this host cannot honour (a cpuset naming a CPU it lacks, a memory limit
    above its memory), naming the field: found before anything is deployed, not as an error
    of a cgroup write."""
    cpus, memory = host_cpus(), host_memory()
    problems: list[tuple[str, str]] = []
    system = spec.system
    given = system.tiers if system.components is None else system.components
    section = "tiers" if system.components is None else "components"
    for tier, t in given.items():
        where = f"system.{section}.{tier}"
        if t.cpuset is not None:
            missing = parse_cpus(t.cpuset) - cpus
            if missing:
                problems.append(
                    (
                        f"{where}.cpuset",
                        f"CPU {_cpu_list(missing)} is not available on this host "
                        f"(CPUs: {_cpu_list(cpus)})",
                    )
                )
        if t.memory is not None and memory is not None and t.memory > memory:
            problems.append(
                (
                    f"{where}.memory",
                    f"{t.memory:,} bytes is more than this host's memory ({memory:,} bytes)",
                )
            )
    if problems:
        raise SpecError(source, problems)


class _FieldError(ValueError):
    """A problem found by a model's own validator at ``path`` below the model (reported as
    the field ``<model's location>.<path>``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class _Resources(BaseModel):
    """What a component (or a tier of the shorthand) is given: per replica."""

    model_config = _STRICT

    cpu: PositiveFloat | None = Field(None, description="cores per replica (cgroup CPU quota)")
    cpuset: str | None = Field(None, description="CPUs the replica may run on, e.g. '1' or '0-1'")
    memory: int | None = Field(None, description="memory limit per replica (bytes, or 256M, 1G)")
    workers: PositiveInt | None = Field(None, description="worker threads / concurrent requests")
    queue_limit: NonNegInt | None = Field(
        None, description="requests in the tier beyond which it answers 503 (0: no limit)"
    )
    processes: PositiveInt | None = Field(
        None, description="embedded: OS processes per replica (default: enough for the quota)"
    )
    cpu_cost: dict[str, NonNegFloat] | None = Field(
        None, description="embedded: extra CPU seconds per request, by interaction or 'default'"
    )
    io_cost: dict[str, NonNegInt] | None = Field(
        None, description="embedded: bytes written and fsynced per request, by interaction"
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        if v is None:
            return None
        size = parse_bytes(v)
        if size <= 0:
            raise ValueError(f"expected a memory limit > 0 such as 256M or 1G, got {v!r}")
        return size

    @field_validator("cpu_cost", "io_cost", mode="before")
    @classmethod
    def _scalar_is_default(cls, v: Any) -> Any:
        return {"default": v} if isinstance(v, int | float) and not isinstance(v, bool) else v

    @field_validator("cpuset")
    @classmethod
    def _cpuset(cls, v: str | None) -> str | None:
        if v is not None:
            parse_cpus(v)
        return v


class TierSpec(_Resources):
    """Resources and knobs of one tier of the three-tier shorthand."""

    connections: PositiveInt | None = Field(
        None, description="web: keep-alive connections to each app replica"
    )
    db_pool: PositiveInt | None = Field(
        None, description="app: connection pool size to each database replica"
    )


class CallSpec(BaseModel):
    model_config = _STRICT

    to: str = Field(description="the component called")
    p: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = Field(
        1.0, description="probability that a visit makes this call"
    )
    times: PositiveInt = Field(1, description="visits to the callee per call made")


class ComponentSpec(_Resources):
    """One component of a system given as a call graph (``system.components``)."""

    replicas: PositiveInt = 1
    pool: PositiveInt | None = Field(None, description="connections to each callee replica")
    calls: list[CallSpec] = Field(default_factory=list)
    parallel: bool = Field(False, description="calls fanned out together and joined")
    storage: bool = Field(False, description="backed by real files (io_cost is written there)")
    pid: list[PositiveInt] | None = Field(None, description="attach: the component's processes")
    match: str | None = Field(None, description="attach: a regular expression of command lines")
    cgroup: str | None = Field(None, description="attach: the component's cgroup path")
    container: str | None = Field(None, description="attach: a Docker/Podman container id")
    url: str | None = Field(None, description="attach: the URL the load generator drives")
    allow_faults: bool = Field(
        False, description="attach: faults may be injected here (stall: SIGSTOP/SIGCONT)"
    )

    @field_validator("pid", mode="before")
    @classmethod
    def _one_pid(cls, v: Any) -> Any:
        return [v] if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None:
            u = urllib.parse.urlsplit(v)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(
                    f"expected an http(s) URL such as http://127.0.0.1:8080/, got {v!r}"
                )
        return v

    @field_validator("container")
    @classmethod
    def _container_id(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9a-fA-F]{4,64}", v):
            raise ValueError(f"expected a container id (4 to 64 hex digits), got {clip(v, 80)!r}")
        return v

    @field_validator("match")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"expected a regular expression: {exc}") from None
        return v

    @property
    def located(self) -> list[str]:
        """The attach fields given (``pid``, ``match``, ``cgroup``, ``container``)."""
        return [k for k in ("pid", "match", "cgroup", "container") if getattr(self, k)]


class SystemSpec(BaseModel):
    """The system: the three-tier shorthand (``topology``, ``tiers``) or a call graph
    (``components``, ``entry``)."""

    model_config = _STRICT

    kind: Literal["embedded", "webstack", "attach", "kafka", "cassandra"] = "embedded"
    topology: str = Field("1/1/1", description="replicas web/app/db, e.g. 1/2/1")
    tiers: dict[Literal["web", "app", "db"], TierSpec] = Field(default_factory=dict)
    entry: str | None = Field(None, description="the component the load enters through")
    components: dict[str, ComponentSpec] | None = Field(
        None, description="the components and their calls (instead of topology and tiers)"
    )
    seed: Integer = Field(1, description="seed of the database contents")
    brokers: PositiveInt | None = Field(None, description="kafka: how many brokers (default 1)")
    topic: TopicSpec | None = Field(None, description="kafka: partitions, replication, min_insync")
    nodes: PositiveInt | None = Field(None, description="cassandra: how many nodes (default 1)")
    keyspace: KeyspaceSpec | None = Field(None, description="cassandra: the replication factor")
    tracing: Probability | None = Field(
        None, description="cassandra: the share of requests the nodes trace (system_traces)"
    )

    @model_validator(mode="before")
    @classmethod
    def _server_component(cls, data: Any) -> Any:
        """kafka's one component is ``broker`` with ``brokers`` replicas, cassandra's ``node``
        with ``nodes`` replicas (resources only)."""
        if not isinstance(data, dict) or data.get("kind") not in SERVERS:
            return data
        kind = data["kind"]
        name, count = SERVERS[kind]
        comps = data.get("components")
        if comps is None:
            comps = {name: {}}
        if not isinstance(comps, dict) or set(comps) != {name}:
            raise _FieldError(
                "components",
                f"{kind}'s component is {name}: components: {{{name}: {{cpu: 0.5, memory: 1G}}}}",
            )
        spec = comps[name] if comps[name] is not None else {}
        if not isinstance(spec, dict):
            return data  # the model reports the type
        extra = sorted(set(spec) - {"cpu", "cpuset", "memory"})
        if extra:
            raise _FieldError(
                f"components.{name}.{extra[0]}",
                f"a {name} takes cpu, cpuset and memory (replicas: system.{count})",
            )
        replicas = data.get(count, 1)
        return {**data, "components": {name: {**spec, "replicas": replicas}}}

    @field_validator("topology")
    @classmethod
    def _topology(cls, v: str) -> str:
        parts = v.split("/")
        if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise ValueError(f"expected three replica counts web/app/db such as 1/2/1, got {v!r}")
        return v

    @field_validator("components")
    @classmethod
    def _names(cls, v: dict[str, ComponentSpec] | None) -> dict[str, ComponentSpec] | None:
        if v is None:
            return None
        if not v:
            raise ValueError("at least one component")
        if len(v) > MAX_COMPONENTS:
            raise ValueError(f"at most {MAX_COMPONENTS:,} components, got {len(v):,}")
        for name in v:
            if not NAME.fullmatch(name):
                raise ValueError(
                    f"expected component names of letters, digits, '-' and '_' (at most 64), "
                    f"got {clip(name, 80)!r}"
                )
        return v

    @model_validator(mode="after")
    def _shape(self) -> SystemSpec:
        for name, kind in (("brokers", "kafka"), ("topic", "kafka"), ("nodes", "cassandra"),
                           ("keyspace", "cassandra"), ("tracing", "cassandra")):  # fmt: skip
            if getattr(self, name) is not None and self.kind != kind:
                raise _FieldError(name, f"{name} belongs to kind {kind}")
        if self.kind == "kafka":
            return self._kafka_shape()
        if self.kind == "cassandra":
            return self._cassandra_shape()
        if self.components is None:
            if self.entry is not None and self.entry != "web":
                raise _FieldError(
                    "entry", f"the three-tier shorthand enters at web, not {self.entry!r}"
                )
            if self.kind == "attach":
                raise _FieldError("components", "attach names the components it watches")
            if self.kind == "webstack" and self.replicas["db"] != 1:
                raise _FieldError(
                    "topology", "webstack runs one PostgreSQL server: topology must end in /1"
                )
            return self
        given = {"topology", "tiers"} & self.model_fields_set
        if given:
            raise _FieldError(
                sorted(given)[0],
                "give either the three-tier shorthand (topology, tiers) or components, not both",
            )
        if self.kind == "webstack":
            raise _FieldError(
                "components",
                "webstack is the nginx -> app -> PostgreSQL chain; give it topology and tiers",
            )
        names = list(self.components)
        for name, c in self.components.items():
            for i, call in enumerate(c.calls):
                if call.to not in self.components:
                    raise _FieldError(
                        f"components.{name}.calls[{i}].to",
                        f"{clip(call.to, 80)!r} is not a component ({', '.join(names)})",
                    )
                if call.to == name:
                    raise _FieldError(
                        f"components.{name}.calls[{i}].to", "a component cannot call itself"
                    )
        loop = cycle({n: [k.to for k in c.calls] for n, c in self.components.items()})
        if loop:
            raise _FieldError("components", "the calls form a cycle " + " -> ".join(loop))
        if self.entry is not None and self.entry not in self.components:
            raise _FieldError(
                "entry", f"{clip(self.entry, 80)!r} is not a component ({', '.join(names)})"
            )
        called = {k.to for c in self.components.values() for k in c.calls}
        roots = [n for n in names if n not in called]
        if self.entry is None and len(roots) != 1:
            raise _FieldError(
                "entry",
                f"the components nobody calls are {', '.join(roots)}; name the one the load "
                "enters through",
            )
        if self.kind != "attach":
            unreached = (
                set(names) - {self.entry_component} - self.graph.downstream(self.entry_component)
            )
            if unreached:
                raise _FieldError(
                    "components",
                    f"{', '.join(n for n in names if n in unreached)} never called from the "
                    f"entry {self.entry_component} (no load would reach them)",
                )
        else:
            for name, c in self.components.items():
                if len(c.located) != 1:
                    raise _FieldError(
                        f"components.{name}",
                        "attach needs exactly one of pid, match, cgroup, container (given: "
                        f"{', '.join(c.located) or 'none'})",
                    )
            if not self.components[self.entry_component].url:
                raise _FieldError(
                    f"components.{self.entry_component}.url",
                    "attach drives the entry component's URL (e.g. http://127.0.0.1:8080/)",
                )
        return self

    def _kafka_shape(self) -> SystemSpec:
        given = sorted({"topology", "tiers", "entry"} & self.model_fields_set)
        if given:
            raise _FieldError(given[0], "kind kafka has brokers (system.brokers), not tiers")
        brokers, topic = self.brokers or 1, self.kafka_topic
        if topic.replication > brokers:
            raise _FieldError(
                "topic.replication",
                f"{topic.replication} replicas need as many brokers, not {brokers}",
            )
        if topic.min_insync > topic.replication:
            raise _FieldError(
                "topic.min_insync", f"at most the replication factor {topic.replication}"
            )
        return self

    def _cassandra_shape(self) -> SystemSpec:
        given = sorted({"topology", "tiers", "entry"} & self.model_fields_set)
        if given:
            raise _FieldError(given[0], "kind cassandra has nodes (system.nodes), not tiers")
        nodes, rf = self.nodes or 1, self.cassandra_keyspace.replication
        if rf > nodes:
            raise _FieldError(
                "keyspace.replication", f"{rf} replicas need as many nodes, not {nodes}"
            )
        return self

    @property
    def cassandra_keyspace(self) -> KeyspaceSpec:
        return self.keyspace or KeyspaceSpec()  # type: ignore[call-arg]

    @property
    def kafka_topic(self) -> TopicSpec:
        return self.topic or TopicSpec()  # type: ignore[call-arg]

    @property
    def is_shorthand(self) -> bool:
        return self.components is None

    @property
    def entry_component(self) -> str:
        if self.components is None:
            return THREE_TIERS[0]
        if self.entry is not None:
            return self.entry
        called = {k.to for c in self.components.values() for k in c.calls}
        return next(n for n in self.components if n not in called)

    @property
    def replicas(self) -> dict[str, int]:
        if self.components is not None:
            return {n: c.replicas for n, c in self.components.items()}
        return dict(zip(TIERS, (int(p) for p in self.topology.split("/")), strict=True))

    @property
    def graph(self) -> Graph:
        """The components front to back with their calls (the shorthand: web -> app -> db)."""
        if self.components is None:
            return Graph.chain(TIERS, self.replicas, {t: self.tier(t).cpu for t in TIERS})
        comps = [
            Component(
                name=n,
                replicas=c.replicas,
                cpu=c.cpu,
                calls=tuple(Call(k.to, k.p, k.times) for k in c.calls),
                parallel=c.parallel,
                storage=c.storage,
            )
            for n, c in self.components.items()
        ]
        return Graph.build(comps, self.entry_component)

    def tier(self, name: str) -> TierSpec:
        return self.tiers.get(name) or TierSpec()  # type: ignore[call-overload]


class LevelRange(BaseModel):
    model_config = _STRICT

    start: PositiveFloat
    stop: PositiveFloat
    step: PositiveFloat

    @model_validator(mode="after")
    def _ordered(self) -> LevelRange:
        if self.stop < self.start:
            raise ValueError("stop must be >= start")
        if (self.stop - self.start) / self.step > 10_000:
            raise ValueError("more than 10,000 levels")
        return self

    def values(self) -> list[float]:
        n = math.floor((self.stop - self.start) / self.step + 1e-9)
        return [self.start + i * self.step for i in range(n + 1)]


#: Run and setup names become folder names: letters, digits, '-', '_', '.' ('+' in setups),
#: no leading dot (so never '.' or '..'), no '/'.
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")
_SETUP_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,99}")


def _check_name(v: str, pattern: re.Pattern[str], extra: str = "") -> str:
    if not pattern.fullmatch(v):
        raise ValueError(
            f"expected a name of letters, digits, '-', '_', '.'{extra} (at most 100, not "
            f"starting with '.'), got {v!r}"
        )
    return v


class SetupSpec(BaseModel):
    model_config = _STRICT

    name: str
    set: dict[str, Any] = Field(default_factory=dict, description="overrides: path -> value")
    plus_one_of: str | None = Field(
        None, description="this setup is the '+1 node' companion of that setup (margin M)"
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return _check_name(v, _SETUP_NAME, ", '+'")


class SweepSpec(BaseModel):
    model_config = _STRICT

    levels: list[PositiveFloat] | LevelRange
    repetitions: PositiveInt = 1
    setups: list[SetupSpec] = Field(default_factory=list)
    grid: dict[str, list[Any]] | None = Field(
        None, description="kafka reliability: the configurations, every combination of these"
    )
    interleave: bool = Field(
        False,
        description="run the setups' levels in turn on one deployment (the setups may differ "
        "only in CPU quotas and levels), so that a host's drift touches all setups alike",
    )

    @field_validator("levels")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("at least one level")
        return v

    @property
    def level_values(self) -> list[float]:
        return self.levels.values() if isinstance(self.levels, LevelRange) else list(self.levels)

    @model_validator(mode="after")
    def _setup_names(self) -> SweepSpec:
        names = [s.name for s in self.setups]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"setup names must be unique: {', '.join(sorted(dup))}")
        for s in self.setups:
            if s.plus_one_of is not None and s.plus_one_of not in names:
                raise ValueError(f"setup '{s.name}': plus_one_of names unknown setup")
        return self


class PhasesSpec(BaseModel):
    model_config = _STRICT

    ramp_up: NonNegFloat = 5.0
    steady: PositiveFloat = 20.0
    ramp_down: NonNegFloat = 2.0

    @property
    def total(self) -> float:
        return self.ramp_up + self.steady + self.ramp_down


class MonitorSpec(BaseModel):
    model_config = _STRICT

    interval: Annotated[float, Field(ge=0.005, le=60, allow_inf_nan=False)] = 0.05


class FaultSpec(BaseModel):
    """A scheduled ground-truth perturbation; times are seconds from the start of each level."""

    model_config = _STRICT

    kind: Literal["stall", "cpu_hog", "network"]
    tier: str | None = Field(None, description="the component (key `tier` as in every file)")
    replica: PositiveInt | None = Field(None, description="1-based replica; default: all")
    at: NonNegFloat = 0.0
    duration: PositiveFloat
    every: PositiveFloat | None = None
    until: PositiveFloat | None = None
    cores: PositiveFloat = Field(1.0, description="cpu_hog: cores the competing load tries to use")
    link: str | None = Field(None, description="network: the link (e.g. producer-brokers)")
    delay: DelaySpec | None = Field(None, description="network: per-packet delay (seconds)")
    loss: LossSpec | None = Field(None, description="network: packet loss")

    @model_validator(mode="after")
    def _period(self) -> FaultSpec:
        if self.every is not None and self.every <= self.duration:
            raise ValueError("every must be longer than duration")
        if self.kind == "network":
            if self.link is None:
                raise _FieldError("link", "a network fault names its link (e.g. producer-brokers)")
            if self.delay is None and self.loss is None:
                raise _FieldError("delay", "a network fault gives a delay, a loss or both")
            if self.tier is not None or self.replica is not None:
                raise _FieldError("tier", "a network fault acts on a link, not a component")
        else:
            if self.tier is None:
                raise _FieldError("tier", f"a {self.kind} fault names its component")
            for name in ("link", "delay", "loss"):
                if getattr(self, name) is not None:
                    raise _FieldError(name, f"{name} belongs to network faults")
        return self

    def windows(self, horizon: float) -> list[tuple[float, float]]:
        """(start, end) of every occurrence that starts before ``horizon``."""
        stop = min(horizon, self.until if self.until is not None else horizon)
        out, t = [], self.at
        while t < stop:
            out.append((t, t + self.duration))
            if self.every is None:
                break
            t += self.every
        return out


def _workload_error(exc: ValidationError) -> _FieldError:
    """The first problem of a server kind's workload, located under ``workload``."""
    err = exc.errors()[0]
    where = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in err["loc"])
    return _FieldError("workload" + where, err["msg"].removeprefix("Value error, "))


class ExperimentSpec(BaseModel):
    model_config = _STRICT

    name: str = "experiment"
    system: SystemSpec = Field(default_factory=SystemSpec)  # type: ignore[arg-type]
    workload: dict[str, Any] = Field(default_factory=dict)
    sweep: SweepSpec
    phases: PhasesSpec = Field(default_factory=PhasesSpec)  # type: ignore[arg-type]
    monitor: MonitorSpec = Field(default_factory=MonitorSpec)  # type: ignore[arg-type]
    faults: list[FaultSpec] = Field(default_factory=list)
    control: ControlSpec | None = Field(
        None, description="kafka adapt: how the live producer is reconfigured"
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return _check_name(v, _NAME)

    @model_validator(mode="after")
    def _kafka_workload(self) -> ExperimentSpec:
        if self.system.kind != "kafka":
            if self.sweep.grid is not None:
                raise _FieldError("sweep.grid", "the reliability grid belongs to kind kafka")
            if self.control is not None:
                raise _FieldError("control", "the producer's control belongs to kind kafka")
            return self
        try:
            workload = self.kafka_workload
        except ValidationError as exc:
            raise _workload_error(exc) from None
        for key, values in (self.sweep.grid or {}).items():
            problem = grid_problem(key, values)
            if problem is not None:
                raise _FieldError(f"sweep.grid.{clip(key, 80)}", problem)
        for i, f in enumerate(self.faults):
            if f.link is not None:
                problem = link_problem(f.link, self.system.brokers or 1, workload)
                if problem is not None:
                    raise _FieldError(f"faults[{i}].link", problem)
        return self

    @property
    def kafka_workload(self) -> KafkaWorkload:
        """The workload of a kafka system (ValidationError if it is not one)."""
        return KafkaWorkload.model_validate(self.workload)

    @model_validator(mode="after")
    def _cassandra_workload(self) -> ExperimentSpec:
        if self.system.kind != "cassandra":
            return self
        try:
            self.cassandra_workload  # noqa: B018 - validates
        except ValidationError as exc:
            raise _workload_error(exc) from None
        for i, f in enumerate(self.faults):
            if f.kind == "network":
                raise _FieldError(f"faults[{i}].kind", "a cassandra system takes stall and "
                                  "cpu_hog faults on its nodes")  # fmt: skip
        return self

    @property
    def cassandra_workload(self) -> CassandraWorkload:
        """The workload of a cassandra system (ValidationError if it is not one)."""
        return CassandraWorkload.model_validate(self.workload)

    @model_validator(mode="after")
    def _faults_fit_topology(self) -> ExperimentSpec:
        replicas = self.system.replicas
        for i, f in enumerate(self.faults):
            if f.tier is None:
                continue  # a network fault: its link is checked with the workload
            if f.tier not in replicas:
                raise _FieldError(
                    f"faults[{i}].tier",
                    f"{clip(f.tier, 80)!r} is not a component ({', '.join(replicas)})",
                )
            if self.system.kind == "attach":
                c = (self.system.components or {})[f.tier]
                if not c.allow_faults:
                    raise _FieldError(
                        f"faults[{i}].tier",
                        f"{f.tier} is a running system's component: faults go only where "
                        f"the spec allows them (system.components.{f.tier}.allow_faults: true)",
                    )
                if f.kind == "cpu_hog" and not (c.cgroup or c.container):
                    raise _FieldError(
                        f"faults[{i}].kind",
                        f"a cpu_hog runs inside the component's cgroup; {f.tier} is located "
                        f"by {c.located[0]}: give its cgroup or container instead",
                    )
            if f.replica is not None and f.replica > replicas[f.tier]:
                raise _FieldError(
                    f"faults[{i}].replica",
                    f"{f.tier} has {replicas[f.tier]} replica(s), not {f.replica}",
                )
        return self

    @property
    def workload_mode(self) -> str:
        default = "open" if self.system.kind == "kafka" else "closed"  # messages/s
        return str(self.workload.get("mode", default))


# ---- overrides ---------------------------------------------------------------------------------
def parse_override(text: str) -> tuple[str, Any]:
    """``path.to.field=value`` -> (path, YAML-decoded value)."""
    path, sep, raw = text.partition("=")
    path = path.strip()
    if not sep or not path or any(not p for p in path.split(".")):
        raise SpecError("--set", [(text, "expected path.to.field=value")])
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # not YAML: the text itself
    except RecursionError:
        raise SpecError("--set", [(path, f"nested more than {MAX_DEPTH} levels deep")]) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date such as 2001-13-45
        raise SpecError("--set", [(path, f"malformed YAML: {exc}")]) from None
    problem = shape_problem(value)
    if problem is not None:
        raise SpecError("--set", [(path, problem)])
    return path, value


def apply_override(doc: dict[str, Any], path: str, value: Any, *, source: str) -> None:
    """Set ``path`` (dots; list items by index) in ``doc``, creating mappings on the way."""
    keys = path.split(".")
    node: Any = doc
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        where = ".".join(keys[: i + 1])
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise SpecError(source, [(where, f"no item {key} (the list has {len(node)})")])
            if last:
                node[int(key)] = value
            else:
                node = node[int(key)]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            else:
                if node.get(key) is None:
                    node[key] = {}
                node = node[key]
        else:
            parent = ".".join(keys[:i]) or "<root>"
            raise SpecError(
                source, [(parent, f"is a value ({node!r}), not a section: cannot set {path}")]
            )


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("list[constrained-float]", "LevelRange", "function-after[_size(), int]",
                      "[key]"):  # fmt: skip
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_experiment(doc: Any, *, source: str = "<spec>") -> ExperimentSpec:
    try:
        return ExperimentSpec.model_validate(doc)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            loc, msg = _format_loc(e["loc"]), e["msg"].removeprefix("Value error, ")
            at = (e.get("ctx") or {}).get("error")
            if isinstance(at, _FieldError):
                loc, msg = (f"{loc}.{at.path}" if loc else at.path), str(at)
            problems.append((loc, msg))
        raise SpecError(source, problems) from None


def load_experiment(
    path: str | Path, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[ExperimentSpec, dict[str, Any]]:
    """Read SPEC.yaml, apply ``--set`` overrides, validate; returns (spec, resolved document)."""
    source = str(path)
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise SpecError(source, [("", "expected a mapping at the top level")])
    for text in overrides:
        key, value = parse_override(text)
        apply_override(doc, key, value, source=f"{source} (--set {text})")
    try:
        spec = parse_experiment(doc, source=source)
        for setup in setup_specs(spec, doc, source=source).values():
            check_host(setup, source=source)
    except SpecError as exc:
        if overrides:
            given = clip(", ".join(overrides), TEXT_CHARS)
            exc.args = (exc.args[0] + "\n(after --set " + given + ")",)
        raise
    return spec, doc


def setup_specs(
    spec: ExperimentSpec, doc: dict[str, Any], *, source: str
) -> dict[str, ExperimentSpec]:
    """Name -> spec of every setup (just ``s0`` when the sweep declares none)."""
    if not spec.sweep.setups:
        return {"s0": spec}
    out: dict[str, ExperimentSpec] = {}
    for i, setup in enumerate(spec.sweep.setups):
        variant = copy.deepcopy(doc)
        for key, value in setup.set.items():
            apply_override(variant, key, value, source=f"{source} (sweep.setups[{i}].set)")
        out[setup.name] = parse_experiment(variant, source=f"{source} (setup {setup.name})")
    return out


__all__ = [
    "ExperimentSpec",
    "FaultSpec",
    "PhasesSpec",
    "SetupSpec",
    "SweepSpec",
    "SystemSpec",
    "TierSpec",
    "apply_override",
    "load_experiment",
    "parse_experiment",
    "parse_override",
    "setup_specs",
]
