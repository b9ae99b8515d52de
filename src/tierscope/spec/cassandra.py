"""Schema of what a ``system.kind: cassandra`` spec adds: the keyspace, and the YCSB workload
with its consistency levels and how requests pick a coordinator.

Design decisions:

* The YCSB core workloads A–F keep YCSB's letters and its operation mixes (:data:`WORKLOADS`):
  A update heavy (read 0.5, update 0.5), B read mostly (0.95 / 0.05), C read only, D read
  latest (read 0.95, insert 0.05 over the ``latest`` distribution), E short ranges (scan 0.95,
  insert 0.05), F read-modify-write (read 0.5, read-modify-write 0.5). ``proportions``
  overrides the mix; ``distribution`` the request distribution (YCSB's zipfian constant 0.99,
  over the records, scrambled, as YCSB's ``ScrambledZipfianGenerator``).
* Records are YCSB's ``usertable``: a key ``user<n>`` and ``field_count`` text fields of
  ``field_length`` bytes, inserted by a load phase before the sweep.
* ``consistency`` applies to every operation; ``read_consistency`` and ``write_consistency``
  override it for reads (read, scan, the read of read-modify-write) and writes (update,
  insert, the write of read-modify-write).
* ``routing: round-robin`` sends each request to the next node, whether it holds a replica or
  not (the thesis's driver, not token-aware: (N − RF)/N of the requests are coordinated by a
  node without a replica); ``token-aware`` sends it to a replica of its key.
* ``warmup``: before the first level, the workload's operations run until their throughput
  stops climbing, for at most that long (closed users, nodes not yet capped), once per
  consistency level and mix: a JVM compiles its hot
  code in the first minute it serves, and until then a read costs it several times what it
  costs later (measured here: 1.7 ms of CPU a read at ONE in the first minute on nodes capped
  at 0.3 core, 0.43 ms once compiled).
* The level of a sweep is, as for HTTP, the client threads (``mode: closed``, each with an
  optional think time), requests/s (``open``), or sessions/s of ``session_length`` requests
  each (``partly-open``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tierscope.spec._types import NonNegFloat, PositiveFloat, PositiveInt, validated

_STRICT = ConfigDict(extra="forbid", frozen=True)

CONSISTENCY = ("one", "quorum", "all")
OPERATIONS = ("read", "update", "insert", "scan", "readmodifywrite")
READS = ("read", "scan", "readmodifywrite")
WRITES = ("update", "insert", "readmodifywrite")
#: YCSB's core workloads: their operation mix and request distribution.
WORKLOADS: dict[str, tuple[dict[str, float], str]] = {
    "a": ({"read": 0.5, "update": 0.5}, "zipfian"),
    "b": ({"read": 0.95, "update": 0.05}, "zipfian"),
    "c": ({"read": 1.0}, "zipfian"),
    "d": ({"read": 0.95, "insert": 0.05}, "latest"),
    "e": ({"scan": 0.95, "insert": 0.05}, "zipfian"),
    "f": ({"read": 0.5, "readmodifywrite": 0.5}, "zipfian"),
}
Consistency = Literal["one", "quorum", "all"]


def _lower(v: Any) -> Any:
    return v.lower() if isinstance(v, str) else v


class KeyspaceSpec(BaseModel):
    """The keyspace YCSB's table lives in (SimpleStrategy)."""

    model_config = _STRICT

    replication: PositiveInt = Field(1, description="the replication factor RF")


class YcsbSpec(BaseModel):
    """A YCSB core workload (see the module)."""

    model_config = _STRICT

    workload: Literal["a", "b", "c", "d", "e", "f"] = "b"
    records: PositiveInt = Field(100_000, description="recordcount: rows loaded before the sweep")
    distribution: Literal["zipfian", "uniform", "latest"] | None = Field(
        None, description="requestdistribution (default: the workload's)"
    )
    field_count: PositiveInt = Field(10, description="fieldcount")
    field_length: PositiveInt = Field(100, description="fieldlength (bytes)")
    max_scan_length: PositiveInt = Field(100, description="scans read 1 to this many rows")
    proportions: dict[str, float] | None = Field(
        None, description="the operation mix instead of the workload's, e.g. {read: 0.9, ...}"
    )

    @field_validator("workload", mode="before")
    @classmethod
    def _letter(cls, v: Any) -> Any:
        v = _lower(v)
        if isinstance(v, str) and v.startswith("workload") and len(v) == 9:
            v = v[-1]  # YCSB's file name: workloada
        if v not in WORKLOADS:
            raise ValueError(f"expected a YCSB workload a, b, c, d, e or f, got {str(v)[:40]!r}")
        return v

    @field_validator("proportions")
    @classmethod
    def _mix(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return None
        for op, p in v.items():
            if op not in OPERATIONS:
                raise ValueError(f"{op[:40]!r} is not an operation ({', '.join(OPERATIONS)})")
            if not 0 <= p <= 1:
                raise ValueError(f"{op}: a proportion from 0 to 1, not {p}")
        if abs(sum(v.values()) - 1) > 1e-6:
            raise ValueError(f"the proportions sum to {sum(v.values()):g}, not 1")
        return v

    @property
    def mix(self) -> dict[str, float]:
        mix = self.proportions or WORKLOADS[self.workload][0]
        return {op: p for op, p in mix.items() if p > 0}

    @property
    def request_distribution(self) -> str:
        return self.distribution or WORKLOADS[self.workload][1]


class CassandraWorkload(BaseModel):
    """YCSB clients on a Cassandra cluster (see the module)."""

    model_config = _STRICT

    mode: Literal["closed", "open", "partly-open"] = "closed"
    ycsb: YcsbSpec = Field(default_factory=YcsbSpec)  # type: ignore[arg-type]
    consistency: Consistency = "one"
    read_consistency: Consistency | None = None
    write_consistency: Consistency | None = None
    routing: Literal["round-robin", "token-aware"] = "round-robin"
    think_time: NonNegFloat = Field(0.0, description="closed: mean exponential think time (s)")
    arrivals: Literal["poisson", "uniform"] = "poisson"
    session_length: PositiveFloat = Field(
        10.0, description="partly-open: mean requests per session (geometric)"
    )
    clients: PositiveInt = Field(1, description="client worker processes sharing the level")
    timeout_s: PositiveFloat = Field(12.0, description="the driver's request timeout")
    warmup: NonNegFloat = Field(
        90.0, description="at most this many seconds of the workload's operations before the "
        "first level, on nodes not yet capped, until the throughput settles: the JVMs compile "
        "their hot code (0: none)",
    )  # fmt: skip

    @field_validator("consistency", "read_consistency", "write_consistency", mode="before")
    @classmethod
    def _level(cls, v: Any) -> Any:
        v = _lower(v)
        if v is not None and v not in CONSISTENCY:
            raise ValueError(f"expected a consistency level one, quorum or all, got "
                             f"{str(v)[:40]!r}")  # fmt: skip
        return v

    @model_validator(mode="after")
    def _think_time_is_closed(self) -> CassandraWorkload:
        if self.mode != "closed" and self.think_time > 0:
            raise ValueError("think_time belongs to mode closed")
        return self

    def consistency_of(self, op: str) -> str:
        """The consistency level of a read (``read``/``scan``) or a write (``update``,
        ``insert``)."""
        if op in ("read", "scan"):
            return self.read_consistency or self.consistency
        return self.write_consistency or self.consistency

    @property
    def levels_used(self) -> set[str]:
        """The consistency levels the workload's operations use."""
        out = set()
        for op in self.ycsb.mix:
            if op in READS:
                out.add(self.consistency_of("read"))
            if op in WRITES:
                out.add(self.consistency_of("update"))
        return out


def replicas_needed(consistency: str, replication: int) -> int:
    """Replicas that must answer at ``consistency`` (ONE 1, QUORUM ⌊RF/2⌋ + 1, ALL RF)."""
    return {"one": 1, "quorum": replication // 2 + 1, "all": replication}[consistency]


def parse_cassandra_workload(doc: dict[str, Any], source: str = "<workload>") -> CassandraWorkload:
    """``doc`` as a cassandra workload; SpecError naming ``source`` and each bad field."""
    return validated(CassandraWorkload, doc, source)


__all__ = [
    "CONSISTENCY",
    "OPERATIONS",
    "WORKLOADS",
    "CassandraWorkload",
    "KeyspaceSpec",
    "YcsbSpec",
    "parse_cassandra_workload",
    "replicas_needed",
]
