"""Compile a model file (``spec.Model``) into the JSON spec of the native engine.

Design decision: the engine knows only stations, routing probabilities and distributions; every
convenience of the YAML format is resolved here. Each class gets a zero-time (or think-time)
*hub* station where its cycles start and end, so "a request" has the same meaning for every
way a class can be written: visits+service and demands become random routing with the right
mean visit counts, routing form keeps its matrix, and think time is the hub's service.
"""

from __future__ import annotations

from typing import Any

from tierscope.errors import InputError
from tierscope.qn.network import rate_multipliers
from tierscope.spec.model import ClassSpec, Model, ServiceDist

#: Routing rows: {from station: {(to station, to class): probability}}.
Rows = dict[int, dict[tuple[int, int], float]]

ZERO = {"dist": "det", "mean": 0.0}
#: What the engine simulates job by job (it refuses more); the analytic solvers take any size.
MAX_SIM_JOBS = 100_000_000
MAX_SIM_SERVERS = 1_000_000
SIM_LIMIT_HINT = "at most {:,} {} to simulate one by one (`tierscope model solve` takes any size)"


def _dist(v: float | ServiceDist) -> dict[str, Any]:
    if isinstance(v, ServiceDist):
        return v.model_dump(exclude_none=True)
    return {"dist": "exp", "mean": float(v)}


def compile_model(model: Model, *, window: float, trace: bool = False) -> dict[str, Any]:
    """The engine spec of ``model``; hub stations follow the model's stations."""
    names = [s.name for s in model.stations]
    index = {n: i for i, n in enumerate(names)}
    joins = [s.name for s in model.stations if s.type == "join"]
    stations: list[dict[str, Any]] = []
    for k, s in enumerate(model.stations):
        if (s.servers or 1) > MAX_SIM_SERVERS:
            hint = SIM_LIMIT_HINT.format(MAX_SIM_SERVERS, "servers")
            raise InputError(f"stations[{k}].servers", s.servers, hint)
        stations.append(
            {
                "name": s.name,
                "kind": s.type,
                "discipline": s.discipline,
                "servers": s.servers,
                "alpha": rate_multipliers(s.servers, s.rates).tolist(),
                "capacity": s.capacity,
                "on_full": s.on_full or "drop",
                "retry": None
                if s.retry is None
                else {"timeout": _dist(s.retry.timeout), "max_retries": s.retry.max_retries},
                "join": index[s.join or joins[0]] if s.type == "fork" else None,
                "branches": [index[b] for b in s.branches or []],
                "quorum": s.quorum,
            }
        )
    C = len(model.classes)
    hubs: list[int] = []
    for cl in model.classes:
        hubs.append(len(stations))
        stations.append(
            {
                "name": f"({'source' if cl.is_open else 'think'}:{cl.name})",
                "kind": "delay",
                "discipline": "ps",
                "servers": 1,
                "alpha": [1.0],
                "capacity": None,
                "on_full": "drop",
                "retry": None,
                "join": None,
                "branches": [],
                "quorum": None,
            }
        )
    n_all = len(stations)
    service: list[list[dict[str, Any] | None]] = [[None] * n_all for _ in range(C)]
    routing: list[dict[str, Any]] = []
    entry: list[list[list[float]]] = []
    classes: list[dict[str, Any]] = []
    class_index = {cl.name: c for c, cl in enumerate(model.classes)}
    # Closed classes given by routing: (reference, hub). A job that comes back to the
    # reference as that class passes the hub first (think time, end of a cycle).
    returns = {
        c: (index[cl.reference or next(iter(cl.routing))], hubs[c])
        for c, cl in enumerate(model.classes)
        if cl.routing is not None and not cl.is_open
    }
    for c, cl in enumerate(model.classes):
        hub = hubs[c]
        for st, v in (cl.service or {}).items():
            service[c][index[st]] = _dist(v)
        if cl.demands is not None:
            for st, d in cl.demands.items():
                if d > 0:
                    service[c][index[st]] = {"dist": "exp", "mean": float(d)}
        think = cl.think_time
        service[c][hub] = {"dist": "exp", "mean": think} if think > 0 else ZERO
        rows = _class_routing(cl, c, index, hub, class_index, returns)
        routing += [
            {"from": [c, src], "to": [[tc, dst, p] for (dst, tc), p in row.items() if p > 0]}
            for src, row in rows.items()
        ]
        if cl.is_open:
            assert cl.arrival_rate is not None
            # A class fed only by class switching has no arrivals of its own.
            fed = cl.arrival_rate > 0
            entry.append(_entry(rows[hub], c, hub) if fed else [])
            classes.append(
                {
                    "name": cl.name,
                    "open": True,
                    "interarrival": {"dist": "exp", "mean": 1.0 / cl.arrival_rate} if fed else None,
                    "population": 0,
                    "reference": hub,
                }
            )
        else:
            if (cl.population or 0) > MAX_SIM_JOBS:
                hint = SIM_LIMIT_HINT.format(MAX_SIM_JOBS, "jobs")
                raise InputError(f"classes[{c}].population", cl.population, hint)
            entry.append([])
            classes.append(
                {
                    "name": cl.name,
                    "open": False,
                    "interarrival": None,
                    "population": int(cl.population or 0),
                    "reference": hub,
                }
            )
    arrival_schedule, population_schedule = [], []
    for sch in model.simulation.schedules:
        c = class_index[sch.class_]
        if model.classes[c].is_open:
            arrival_schedule.append({"class": c, "times": sch.times, "multipliers": sch.values})
        else:
            population_schedule.append(
                {"class": c, "times": sch.times, "populations": [int(v) for v in sch.values]}
            )
    return {
        "stations": stations,
        "classes": classes,
        "service": service,
        "routing": routing,
        "entry": entry,
        "perturbations": [
            {
                "station": index[p.station],
                "factor": p.factor,
                "start": p.start,
                "duration": p.duration,
                "period": p.period,
                "until": p.until,
            }
            for p in model.simulation.perturbations
        ],
        "arrival_schedule": arrival_schedule,
        "population_schedule": population_schedule,
        "window": window,
        "trace": trace,
    }


def _entry(first: dict[tuple[int, int], float], c: int, hub: int) -> list[list[float]]:
    """Where an open class's external arrivals go: straight to the hub's first
    destinations when those take all the mass and keep the class (the zero-time
    pass through the source hub would change nothing but cost time), else through
    the hub (whose missing mass is a request that visits nothing)."""
    targets: list[list[float]] = [[k, p] for (k, tc), p in first.items() if p > 0 and tc == c]
    if len(targets) == len(first) and abs(sum(p for _, p in targets) - 1.0) <= 1e-9:
        return targets
    return [[hub, 1.0]]


def _class_routing(
    cl: ClassSpec,
    c: int,
    index: dict[str, int],
    hub: int,
    class_index: dict[str, int],
    returns: dict[int, tuple[int, int]],
) -> Rows:
    """Routing rows of one class, hub included; missing mass leaves (open)."""
    if cl.routing is not None:
        return _explicit_routing(cl, c, index, hub, class_index, returns)
    visits = {index[s]: v for s, v in (cl.visits or {}).items() if v > 0}
    if cl.demands is not None:
        visits = {index[s]: 1.0 for s, d in cl.demands.items() if d > 0}
    total = sum(visits.values())
    if total >= 1:
        # first visit forced, then continue w.p. 1 - 1/total: E[visits to j] = V_j
        first = {(j, c): v / total for j, v in visits.items()}
        cont = {(j, c): (1 - 1 / total) * v / total for j, v in visits.items()}
        leave = 1 / total
    else:
        # a cycle may visit nothing: geometric number of visits with mean total
        first = cont = {(j, c): v / (1 + total) for j, v in visits.items()}
        leave = 1 / (1 + total)
    rows: Rows = {hub: dict(first)}
    if total < 1 and not cl.is_open:
        rows[hub][(hub, c)] = leave  # an empty cycle
    for j in visits:
        rows[j] = dict(cont)
        if not cl.is_open:  # open classes leave with the missing mass
            rows[j][(hub, c)] = leave
    return rows


def _explicit_routing(
    cl: ClassSpec,
    c: int,
    index: dict[str, int],
    hub: int,
    class_index: dict[str, int],
    returns: dict[int, tuple[int, int]],
) -> Rows:
    """Rows of a routing-form class; targets ``station:class`` switch class. A closed job that
    comes back to its class's reference passes that class's hub first."""
    rows: Rows = {}
    for src, st, to, p in cl.routing_targets(set(index)):
        tc, k = class_index[to], index[st]
        if tc in returns and returns[tc][0] == k:
            k = returns[tc][1]
        row = rows.setdefault(index[src], {})
        row[(k, tc)] = row.get((k, tc), 0.0) + p
    if cl.is_open:
        rows[hub] = {(index[s], c): p for s, p in (cl.entry or {}).items()}
    else:
        rows[hub] = {(returns[c][0], c): 1.0}
    return rows
