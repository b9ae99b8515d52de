"""Schema of the queueing-network model file (PRODUCT.md §4.1).

Design decision: pydantic checks each field in isolation (types, signs, required combinations),
then :func:`parse_model` runs the cross-reference checks (station names, routing mass) that need
the whole document, so every problem is reported with a precise location such as
``classes[1].visits.dsk`` instead of a generic "model invalid".
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from tierscope.errors import SpecError
from tierscope.spec._types import NonNegFloat, NotBool, Probability

_STRICT = ConfigDict(extra="forbid", frozen=True)
#: Most jobs of a class, servers or buffer places of a station (sums of them stay in int64).
MAX_JOBS = 10**15
#: Most phases, retries or join quorum.
MAX_COUNT = 10**6
#: Times (seconds), rates (per second) and rate multipliers lie in [TINY, HUGE] or are 0: the
#: solvers' arithmetic (1/D, D^N, N/D) stays finite for every population up to MAX_JOBS.
TINY, HUGE = 1e-9, 1e9


def _zero_or_not_tiny(v: float) -> float:
    if 0 < v < TINY:
        raise ValueError(f"expected 0 or a value of at least {TINY:g}, got {v!r}")
    return v


Amount = Annotated[
    float, NotBool, Field(ge=0, le=HUGE, allow_inf_nan=False), AfterValidator(_zero_or_not_tiny)
]
PositiveAmount = Annotated[float, NotBool, Field(ge=TINY, le=HUGE, allow_inf_nan=False)]
Jobs = Annotated[int, NotBool, Field(ge=0, le=MAX_JOBS)]
PositiveJobs = Annotated[int, NotBool, Field(ge=1, le=MAX_JOBS)]
Count = Annotated[int, NotBool, Field(ge=0, le=MAX_COUNT)]
PositiveCount = Annotated[int, NotBool, Field(ge=1, le=MAX_COUNT)]


class ServiceDist(BaseModel):
    """A service-time distribution; analytic solvers use only its mean."""

    model_config = _STRICT

    dist: Literal["exp", "det", "erlang", "hyperexp", "lognormal", "uniform", "ph", "empirical"]
    mean: PositiveAmount | None = None
    scv: Annotated[NonNegFloat, Field(le=1e6)] | None = None
    k: PositiveCount | None = None
    low: Amount | None = None
    high: PositiveAmount | None = None
    alpha: list[Probability] | None = None
    T: list[list[float]] | None = None
    samples: list[Amount] | None = None

    @model_validator(mode="after")
    def _parameters_match_family(self) -> ServiceDist:
        need: dict[str, tuple[str, ...]] = {
            "exp": ("mean",),
            "det": ("mean",),
            "erlang": ("mean", "k"),
            "hyperexp": ("mean", "scv"),
            "lognormal": ("mean", "scv"),
            "uniform": ("low", "high"),
            "ph": ("alpha", "T"),
            "empirical": ("samples",),
        }
        missing = [p for p in need[self.dist] if getattr(self, p) is None]
        if missing:
            raise ValueError(f"distribution '{self.dist}' needs {', '.join(missing)}")
        if self.dist == "hyperexp" and self.scv is not None and self.scv < 1:
            raise ValueError("hyperexp needs scv >= 1 (use erlang for scv < 1)")
        uniform_empty = self.low is not None and self.high is not None and self.high <= self.low
        if self.dist == "uniform" and uniform_empty:
            raise ValueError("uniform needs high > low")
        if self.dist == "empirical" and not any(s > 0 for s in self.samples or []):
            raise ValueError("empirical needs at least one positive sample")
        if self.dist == "ph":
            self._check_ph()
        return self

    def _check_ph(self) -> None:
        import numpy as np

        alpha = np.asarray(self.alpha, dtype=float)
        T = np.asarray(self.T, dtype=float)
        if T.ndim != 2 or T.shape != (alpha.size, alpha.size):
            raise ValueError("ph needs a square T with one row per entry of alpha")
        if abs(alpha.sum() - 1) > 1e-9:
            raise ValueError("ph alpha must sum to 1")
        try:
            m = float(alpha @ np.linalg.solve(-T, np.ones(alpha.size)))
        except np.linalg.LinAlgError:
            raise ValueError("ph T must be invertible (a transient generator)") from None
        if not m > 0 or not math.isfinite(m):
            raise ValueError("ph (alpha, T) must have a finite positive mean")

    @property
    def mean_value(self) -> float:
        """Mean service time of the distribution (seconds)."""
        if self.mean is not None:
            return self.mean
        if self.dist == "uniform":
            assert self.low is not None and self.high is not None
            return (self.low + self.high) / 2
        if self.dist == "empirical":
            assert self.samples is not None
            return sum(self.samples) / len(self.samples)
        import numpy as np

        alpha = np.asarray(self.alpha, dtype=float)
        T = np.asarray(self.T, dtype=float)
        return float(alpha @ np.linalg.solve(-T, np.ones(alpha.size)))


def _service_tag(v: Any) -> str:
    return "dist" if isinstance(v, dict | ServiceDist) else "number"


ServiceValue = Annotated[
    Annotated[PositiveAmount, Tag("number")] | Annotated[ServiceDist, Tag("dist")],
    Discriminator(_service_tag),
]


class Retry(BaseModel):
    """Retransmission of a job dropped by a full buffer, after a timeout (like TCP)."""

    model_config = _STRICT

    timeout: ServiceValue
    max_retries: Count = 3


class Station(BaseModel):
    """A service centre: a queue (FCFS/PS, m servers, optional load-dependent rates) or a delay."""

    model_config = _STRICT

    name: Annotated[str, Field(min_length=1)]
    type: Literal["queue", "delay", "fork", "join"] = "queue"
    servers: PositiveJobs = 1
    discipline: Literal["fcfs", "ps"] = "fcfs"
    rates: Annotated[list[PositiveAmount], Field(min_length=1)] | None = None
    capacity: PositiveJobs | None = None
    on_full: Literal["drop", "block"] | None = None
    retry: Retry | None = None
    branches: list[str] | None = None
    join: str | None = None
    quorum: PositiveCount | None = None

    @model_validator(mode="after")
    def _fields_fit_type(self) -> Station:
        if self.type != "queue" and (self.servers != 1 or self.rates is not None):
            raise ValueError(f"'servers' and 'rates' apply to queue stations, not {self.type}")
        if self.branches is not None and self.type != "fork":
            raise ValueError("'branches' applies to fork stations only")
        if self.type == "fork" and not self.branches:
            raise ValueError("a fork station needs 'branches'")
        if self.quorum is not None and self.type != "join":
            raise ValueError("'quorum' applies to join stations only")
        if self.on_full is not None and self.capacity is None:
            raise ValueError("'on_full' needs 'capacity'")
        if self.retry is not None and self.on_full == "block":
            raise ValueError("'retry' applies to stations that drop (on_full: drop)")
        if self.join is not None and self.type != "fork":
            raise ValueError("'join' applies to fork stations only")
        if self.capacity is not None and self.capacity < self.servers:
            raise ValueError(f"capacity {self.capacity} is below servers {self.servers}")
        return self


class ClassSpec(BaseModel):
    """A customer class: closed (population) or open (arrival_rate), with its demands."""

    model_config = _STRICT

    name: Annotated[str, Field(min_length=1)]
    population: Jobs | None = None
    arrival_rate: Amount | None = None
    think_time: Amount = 0.0
    visits: dict[str, Amount] | None = None
    service: dict[str, ServiceValue] | None = None
    demands: dict[str, Amount] | None = None
    routing: dict[str, dict[str, Probability]] | None = None
    entry: dict[str, Probability] | None = None
    reference: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ClassSpec:
        if (self.population is None) == (self.arrival_rate is None):
            raise ValueError("give exactly one of 'population' (closed) or 'arrival_rate' (open)")
        if self.arrival_rate is not None and self.think_time > 0:
            raise ValueError("'think_time' applies to closed classes only")
        forms = [self.visits is not None, self.demands is not None, self.routing is not None]
        if sum(forms) != 1:
            raise ValueError("give exactly one of 'visits'+'service', 'demands' or 'routing'")
        if self.demands is not None and self.service is not None:
            raise ValueError("'service' goes with 'visits' or 'routing', not with 'demands'")
        if (self.visits is not None or self.routing is not None) and self.service is None:
            raise ValueError("'visits' and 'routing' need 'service' (mean time per visit)")
        if self.entry is not None and (self.routing is None or self.arrival_rate is None):
            raise ValueError("'entry' applies to open classes given by 'routing'")
        if self.reference is not None and (self.routing is None or self.population is None):
            raise ValueError("'reference' applies to closed classes given by 'routing'")
        if self.arrival_rate == 0 and self.routing is None:
            raise ValueError(
                "'arrival_rate: 0' (a class fed only by class switching) needs 'routing'"
            )
        if self.routing is not None and self.arrival_rate and not self.entry:
            raise ValueError("an open class given by 'routing' needs 'entry'")
        return self

    @property
    def is_open(self) -> bool:
        return self.arrival_rate is not None

    def routing_targets(self, stations: set[str]) -> list[tuple[str, str, str, float]]:
        """``(from, to_station, to_class, p)`` of every routing entry, class switches resolved."""
        out = []
        for src, row in (self.routing or {}).items():
            for dst, p in row.items():
                station, cls = split_target(dst, stations)
                out.append((src, station, cls or self.name, p))
        return out


def split_target(dst: str, stations: set[str]) -> tuple[str, str | None]:
    """A routing target ``station`` (same class) or ``station:class`` (class switch).

    A name that is a station is a station, even if it contains ':'; otherwise the part after the
    last ':' names the class the job becomes.
    """
    if dst in stations or ":" not in dst:
        return dst, None
    station, _, cls = dst.rpartition(":")
    return station, cls


class Perturbation(BaseModel):
    """Scheduled ground truth: a station's speed multiplied by ``factor`` (0 = stall)."""

    model_config = _STRICT

    station: str
    factor: Amount
    start: Amount
    duration: PositiveAmount
    period: PositiveAmount | None = None  # repeat every period ...
    until: PositiveAmount | None = None  # ... up to this time (default: forever)

    @model_validator(mode="after")
    def _period_covers_duration(self) -> Perturbation:
        if self.period is not None and self.period < self.duration:
            raise ValueError(f"period {self.period} is shorter than duration {self.duration}")
        return self


class Schedule(BaseModel):
    """A piecewise-constant schedule for one class: from ``times[i]`` on, ``values[i]`` holds.

    For an open class the values multiply its arrival rate; for a closed class they are its
    population.
    """

    model_config = _STRICT

    class_: Annotated[str, Field(alias="class")]
    times: Annotated[list[Amount], Field(min_length=1)]
    values: Annotated[list[Annotated[NonNegFloat, Field(le=MAX_JOBS)]], Field(min_length=1)]

    @model_validator(mode="after")
    def _aligned(self) -> Schedule:
        if len(self.times) != len(self.values):
            raise ValueError("'times' and 'values' must have the same length")
        if any(b <= a for a, b in zip(self.times, self.times[1:], strict=False)):
            raise ValueError("'times' must increase")
        return self


class SimulationSpec(BaseModel):
    """Simulation-only parts of a model: perturbations and load schedules."""

    model_config = _STRICT

    perturbations: list[Perturbation] = []
    schedules: list[Schedule] = []


class Model(BaseModel):
    """A whole queueing-network model file."""

    model_config = _STRICT

    name: str | None = None
    stations: Annotated[list[Station], Field(min_length=1)]
    classes: Annotated[list[ClassSpec], Field(min_length=1)]
    simulation: SimulationSpec = SimulationSpec()

    @field_validator("stations")
    @classmethod
    def _unique_stations(cls, v: list[Station]) -> list[Station]:
        _check_unique([s.name for s in v], "station")
        return v

    @field_validator("classes")
    @classmethod
    def _unique_classes(cls, v: list[ClassSpec]) -> list[ClassSpec]:
        _check_unique([c.name for c in v], "class")
        return v


def _check_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"duplicate {what} name '{n}'")
        seen.add(n)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("number", "dist"):  # union tags of ServiceValue say nothing to a user
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _cross_reference_errors(model: Model) -> list[tuple[str, str]]:
    """Checks that need the whole document: names used by classes exist, routing mass <= 1."""
    names = {s.name for s in model.stations}
    errors: list[tuple[str, str]] = []

    def check_name(loc: str, name: str) -> None:
        if name not in names:
            errors.append((loc, f"unknown station '{name}' (stations: {', '.join(sorted(names))})"))

    kinds = {s.name: s.type for s in model.stations}
    joins = [s.name for s in model.stations if s.type == "join"]
    for s_i, st in enumerate(model.stations):
        for b in st.branches or []:
            check_name(f"stations[{s_i}].branches", b)
        if st.join is not None:
            check_name(f"stations[{s_i}].join", st.join)
            if kinds.get(st.join, "join") != "join":
                errors.append((f"stations[{s_i}].join", f"'{st.join}' is not a join station"))
        elif st.type == "fork" and len(joins) != 1:
            errors.append((f"stations[{s_i}].join", "name the join station of this fork"))
    for p_i, pert in enumerate(model.simulation.perturbations):
        check_name(f"simulation.perturbations[{p_i}].station", pert.station)
    class_kind = {c.name: c.is_open for c in model.classes}
    for s_i, sch in enumerate(model.simulation.schedules):
        if sch.class_ not in class_kind:
            errors.append((f"simulation.schedules[{s_i}].class", f"unknown class '{sch.class_}'"))
        elif not class_kind[sch.class_] and any(v != int(v) for v in sch.values):
            errors.append((f"simulation.schedules[{s_i}].values", "populations must be integers"))
    for c_i, cl in enumerate(model.classes):
        base = f"classes[{c_i}]"
        for field in ("visits", "service", "demands", "entry"):
            for key in getattr(cl, field) or {}:
                check_name(f"{base}.{field}.{key}", key)
        if cl.reference is not None:
            check_name(f"{base}.reference", cl.reference)
        for src, row in (cl.routing or {}).items():
            check_name(f"{base}.routing.{src}", src)
            for dst in row:
                station, switch = split_target(dst, names)
                check_name(f"{base}.routing.{src}.{dst}", station)
                if switch is not None:
                    loc = f"{base}.routing.{src}.{dst}"
                    errors += _switch_errors(model, cl, loc, station, switch)
            mass = sum(row.values())
            if mass > 1 + 1e-9:
                errors.append((f"{base}.routing.{src}", f"probabilities sum to {mass:g} > 1"))
            elif cl.population is not None and abs(mass - 1) > 1e-9:
                errors.append(
                    (
                        f"{base}.routing.{src}",
                        f"closed class: probabilities must sum to 1, not {mass:g}",
                    )
                )
        if cl.entry is not None:
            mass = sum(cl.entry.values())
            if abs(mass - 1) > 1e-9:
                errors.append((f"{base}.entry", f"probabilities must sum to 1, not {mass:g}"))
        if cl.population and cl.think_time == 0 and _no_demand(cl):
            errors.append(
                (
                    base,
                    f"class '{cl.name}' has jobs but no demand and no think time: its throughput "
                    "would be unbounded (give a demand or a think_time > 0)",
                )
            )
        if cl.visits is not None and cl.service is not None:
            for st_name, v in cl.visits.items():
                if v > 0 and st_name not in cl.service:
                    errors.append(
                        (f"{base}.service", f"missing service time for station '{st_name}'")
                    )
        if cl.arrival_rate == 0 and not any(
            t[2] == cl.name and t[2] != other.name
            for other in model.classes
            for t in other.routing_targets(names)
        ):
            errors.append((f"{base}.arrival_rate", "is 0, but no class switches into this class"))
        if cl.routing is not None and cl.service is not None:
            own = [t for t in cl.routing_targets(names) if t[2] == cl.name]
            visited = set(cl.routing) | {t[1] for t in own} | set(cl.entry or {})
            served = {s.name for s in model.stations if s.type in ("queue", "delay")}
            for st_name in sorted(visited & served):
                if st_name not in cl.service:
                    errors.append(
                        (f"{base}.service", f"missing service time for station '{st_name}'")
                    )
    return errors


def _no_demand(cl: ClassSpec) -> bool:
    """Whether the class's own demands or visits ask no time anywhere (routing: never known
    here; the compiled network checks it)."""
    if cl.demands is not None:
        return not any(d > 0 for d in cl.demands.values())
    if cl.visits is not None and cl.service is not None:
        return not any(v > 0 and k in cl.service for k, v in cl.visits.items())
    return False


def _switch_errors(
    model: Model, cl: ClassSpec, loc: str, station: str, switch: str
) -> list[tuple[str, str]]:
    """What is wrong with a switch of class ``cl`` into class ``switch`` at ``station``."""
    target = next((c for c in model.classes if c.name == switch), None)
    if target is None:
        names = ", ".join(c.name for c in model.classes)
        return [(loc, f"unknown class '{switch}' to switch to (classes: {names})")]
    if target.is_open != cl.is_open:
        return [(loc, f"switches between an open and a closed class ('{cl.name}' to '{switch}')")]
    if target.routing is None:
        return [(loc, f"class switching needs class '{switch}' to be given by 'routing'")]
    kinds = {s.name: s.type for s in model.stations}
    if (
        kinds.get(station) in ("queue", "delay")
        and target.service is not None
        and station not in target.service
    ):
        return [(loc, f"class '{switch}' has no service time at '{station}'")]
    if not target.is_open and station not in target.routing:
        return [(loc, f"closed class '{switch}' has no routing row from '{station}'")]
    return []


def switching_pairs(model: Model) -> list[tuple[str, str]]:
    """``(from_class, to_class)`` of every class switch in the model, in order of appearance."""
    names = {s.name for s in model.stations}
    pairs: list[tuple[str, str]] = []
    for cl in model.classes:
        for _, _, to, _ in cl.routing_targets(names):
            if to != cl.name and (cl.name, to) not in pairs:
                pairs.append((cl.name, to))
    return pairs


def class_chains(model: Model) -> list[int]:
    """Chain of each class: classes linked by switching share the chain of the first of them."""
    index = {cl.name: c for c, cl in enumerate(model.classes)}
    chain = list(range(len(model.classes)))

    def root(c: int) -> int:
        while chain[c] != c:
            c = chain[c]
        return c

    for a, b in switching_pairs(model):
        ra, rb = root(index[a]), root(index[b])
        chain[max(ra, rb)] = min(ra, rb)
    return [root(c) for c in range(len(chain))]


def parse_model(data: Any, source: str = "<model>") -> Model:
    """Validate a decoded YAML/JSON document as a :class:`Model`.

    Raises :class:`~tierscope.errors.SpecError` listing every problem with its location.
    """
    try:
        model = Model.model_validate(data)
    except ValidationError as exc:
        problems = [(_format_loc(e["loc"]), _clean_msg(e["msg"])) for e in exc.errors()]
        raise SpecError(source, problems) from None
    problems = _cross_reference_errors(model)
    if problems:
        raise SpecError(source, problems)
    return model


def _clean_msg(msg: str) -> str:
    return msg.removeprefix("Value error, ")
