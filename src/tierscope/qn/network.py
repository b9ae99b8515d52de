"""The compiled queueing network that every analytic solver takes.

Design decision: the YAML schema (``tierscope.spec.model``) is made for people; solvers want dense
arrays. :meth:`Network.from_model` turns one into the other once: it solves the traffic equations
of routing-form classes into visit ratios, reduces service distributions to their means and
expands ``servers`` and ``rates`` into one rate-multiplier vector ``alpha`` per station, so that no
solver has to know how the model was written.

A station with more than :data:`MAX_RATE_LEVELS` rate levels (say 10^9 servers) never gets its
vector materialised: with at least as many servers as jobs can ever be there it is an infinite
server (a delay whose utilisation is divided by its servers: ``capacity``), and with fewer jobs
than levels in a closed network its vector stops at the population; anything else is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tierscope.errors import InputError, UnsupportedModelError
from tierscope.spec.model import (
    ClassSpec,
    Model,
    ServiceDist,
    class_chains,
    switching_pairs,
)

FloatArray = np.ndarray

#: Most rate levels alpha(1..L) materialised per station (8 MB of floats).
MAX_RATE_LEVELS = 1_000_000
#: Standard deviations of an open station's offered load beyond which servers are never all busy.
_OPEN_SPREAD = 40.0


@dataclass(frozen=True, eq=False)
class Network:
    """Dense description of a multi-class network: C classes (rows) by M stations (columns).

    ``alpha[k]`` holds the rate multipliers alpha_k(1..L_k) of station k (the rate with j jobs
    present is alpha_k(j)/S; alpha_k(j) = alpha_k(L_k) beyond L_k): ``[1]`` for a single server,
    ``[1, 2, ..., m]`` for m servers, ``min(j, m) * r(j)`` with load-dependent ``rates`` r.
    """

    station_names: tuple[str, ...]
    class_names: tuple[str, ...]
    is_delay: np.ndarray  # [M] bool
    servers: np.ndarray  # [M] int
    alpha: tuple[np.ndarray, ...]  # [M] each of length L_k >= 1
    discipline: tuple[str, ...]  # [M] "fcfs" | "ps" | "delay"
    visits: FloatArray  # [C, M]
    service: FloatArray  # [C, M] mean service time per visit (0 where not visited)
    is_open: np.ndarray  # [C] bool
    population: np.ndarray  # [C] int (0 for open classes)
    arrival_rate: FloatArray  # [C] (0 for closed classes)
    think_time: FloatArray  # [C]
    name: str = ""
    simulation_only: tuple[str, ...] = field(default=())
    # [M] rate multiplier at saturation, alpha_k(L_k) of the full law (1 for delays); None: the
    # last entry of alpha. It differs from alpha[-1] where a station was compacted.
    capacity: FloatArray | None = None
    # The largest total closed population the compacted stations are valid for (None: any).
    max_population: int | None = None

    # ---- shape -------------------------------------------------------------------------------
    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_stations(self) -> int:
        return len(self.station_names)

    @property
    def demands(self) -> FloatArray:
        """Service demand D[c, k] = V[c, k] * S[c, k] (seconds per system visit)."""
        return self.visits * self.service

    @property
    def closed(self) -> np.ndarray:
        return ~self.is_open

    @property
    def is_load_dependent(self) -> np.ndarray:
        """[M] True for queue stations whose rate depends on the number present."""
        return np.array(
            [
                not d and (a.size > 1 or a[0] != 1.0)
                for d, a in zip(self.is_delay, self.alpha, strict=True)
            ]
        )

    @property
    def has_rate_law(self) -> np.ndarray:
        """[M] True for queue stations whose rates are not those of plain servers (alpha(j) is
        not c min(j, m) for a constant speed c): their utilisation, the mean share of servers
        busy, needs the distribution of the number present, not the throughput alone."""
        out = np.zeros(self.n_stations, dtype=bool)
        for k, a in enumerate(self.alpha):
            if not self.is_delay[k]:
                j = np.arange(1, a.size + 1)
                plain = a[0] * np.minimum(j, self.servers[k])
                out[k] = not np.allclose(a, plain, rtol=1e-12, atol=0)
        return out

    @property
    def saturation_rate(self) -> FloatArray:
        """[M] alpha_k(L_k), the rate multiplier of a saturated station (1 for delays); the
        utilisation of a queue is its busy servers divided by this."""
        if self.capacity is not None:
            return np.asarray(self.capacity, dtype=float)
        return np.array(
            [1.0 if d else float(a[-1]) for d, a in zip(self.is_delay, self.alpha, strict=True)]
        )

    def alpha_at(self, k: int, j: int | np.ndarray) -> np.ndarray:
        """alpha_k(j) for j >= 1 (the last multiplier repeats)."""
        a = self.alpha[k]
        idx = np.minimum(np.asarray(j), a.size) - 1
        return a[idx]

    # ---- derived networks --------------------------------------------------------------------
    def with_population(self, population: Sequence[int]) -> Network:
        """The same network with other closed-class populations (open classes keep 0)."""
        pop = np.asarray(population, dtype=np.int64)
        if pop.shape != (self.n_classes,) or np.any(pop < 0):
            raise InputError("population", list(population), f"{self.n_classes} integers >= 0")
        pop = np.where(self.is_open, 0, pop)
        if self.max_population is not None and int(pop.sum()) > self.max_population:
            raise InputError(
                "population",
                [int(n) for n in pop],
                f"at most {self.max_population:,} jobs in all (stations with more than "
                f"{MAX_RATE_LEVELS:,} servers were compiled for that population)",
            )
        return replace(self, population=pop)

    # ---- checks used by solvers --------------------------------------------------------------
    def require_product_form(self, method: str) -> None:
        """Raise if the model has parts that only the simulator handles."""
        if self.simulation_only:
            raise UnsupportedModelError(
                "method",
                method,
                "a model without " + "; ".join(self.simulation_only) + " (use the simulator)",
            )

    def product_form_notes(self) -> list[str]:
        """Notes on what product-form solvers had to assume about this network."""
        bad = self.fcfs_class_dependent()
        if not bad:
            return []
        return [
            "FCFS stations with class-dependent service times are not product form; "
            "solved as PS: " + ", ".join(bad)
        ]

    def fcfs_class_dependent(self) -> list[str]:
        """FCFS queues whose mean service time differs between classes (not product form)."""
        out = []
        for k, disc in enumerate(self.discipline):
            if disc != "fcfs":
                continue
            s = self.service[:, k][self.visits[:, k] > 0]
            if s.size > 1 and np.ptp(s) > 1e-12 * s.max():
                out.append(self.station_names[k])
        return out

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def from_model(cls, model: Model) -> Network:
        names = [s.name for s in model.stations]
        index = {n: i for i, n in enumerate(names)}
        M, C = len(names), len(model.classes)
        is_delay = np.array([s.type == "delay" for s in model.stations])
        servers = np.array([s.servers for s in model.stations], dtype=np.int64)
        discipline = ["delay" if s.type == "delay" else s.discipline for s in model.stations]
        sim_only: list[str] = []
        for s in model.stations:
            if s.type in ("fork", "join"):
                sim_only.append(f"{s.type} station '{s.name}'")
            elif s.capacity is not None:
                sim_only.append(f"finite capacity at '{s.name}'")
        switches = switching_pairs(model)
        chained = {name for pair in switches for name in pair}
        visits = np.zeros((C, M))
        service = np.zeros((C, M))
        for c, cl in enumerate(model.classes):
            visits[c], service[c] = _class_visits_service(cl, c, index, cl.name in chained)
        if switches:
            # Product form holds with chains, but the solvers here know classes only.
            moves = ", ".join(f"'{a}' to '{b}'" for a, b in switches)
            sim_only.append(f"class switching ({moves})")
            visits = _chain_visits(model, index)
            service[visits == 0] = 0.0
        is_open = np.array([c.is_open for c in model.classes])
        population = np.array([c.population or 0 for c in model.classes], dtype=np.int64)
        arrival_rate = np.array([c.arrival_rate or 0.0 for c in model.classes])
        think_time = np.array([c.think_time for c in model.classes])
        demands = visits * service
        idle = (population > 0) & (demands.sum(axis=1) + think_time <= 0)
        if idle.any():
            c = int(np.flatnonzero(idle)[0])
            raise InputError(
                f"classes[{c}]",
                model.classes[c].name,
                "a closed class with a demand or a think time > 0 (with neither its "
                "throughput is unbounded)",
            )
        jobs = int(population.sum())
        offered = np.where(is_open, arrival_rate, 0.0) @ demands  # [M] open work per second
        alpha: list[np.ndarray] = []
        capacity = np.ones(M)
        compacted = False
        for k, st in enumerate(model.stations):
            if is_delay[k]:
                alpha.append(np.ones(1))
                continue
            r_last = st.rates[-1] if st.rates else 1.0
            capacity[k] = st.servers * r_last
            if max(st.servers, len(st.rates or ())) <= MAX_RATE_LEVELS:
                alpha.append(rate_multipliers(st.servers, st.rates))
                continue
            compacted = True
            a, delay = _compact_rates(k, st.servers, st.rates, jobs, float(offered[k]))
            alpha.append(a)
            if delay:
                is_delay[k] = True
                discipline[k] = "delay"
        return cls(
            station_names=tuple(names),
            class_names=tuple(c.name for c in model.classes),
            is_delay=is_delay,
            servers=servers,
            alpha=tuple(alpha),
            discipline=tuple(discipline),
            visits=visits,
            service=service,
            is_open=is_open,
            population=population,
            arrival_rate=arrival_rate,
            think_time=think_time,
            name=model.name or "",
            simulation_only=tuple(sim_only),
            capacity=capacity,
            max_population=jobs if compacted else None,
        )


def _compact_rates(
    k: int, servers: int, rates: list[float] | None, jobs: int, offered: float
) -> tuple[np.ndarray, bool]:
    """(alpha, is an infinite server) of station k whose law has more than MAX_RATE_LEVELS
    levels, given ``jobs`` closed jobs in the network and ``offered`` open work per second."""
    # Most jobs ever at the station, but for a probability far below rounding: the closed ones
    # plus the open ones' Poisson-like number (mean = offered work) 40 sd out.
    most = jobs + (offered + _OPEN_SPREAD * (offered**0.5 + 1.0) if offered > 0 else 0.0)
    if rates is None and servers >= most:
        return np.ones(1), True
    if offered == 0 and jobs <= MAX_RATE_LEVELS:
        # Closed jobs only: alpha(j) for j > jobs is never used.
        return rate_multipliers(min(servers, max(jobs, 1)), (rates or [1.0])[: max(jobs, 1)]), False
    raise InputError(
        f"stations[{k}].servers",
        servers,
        f"at most {MAX_RATE_LEVELS:,} servers (or rates), or servers enough for every job "
        "that can be there (the station is then a delay)",
    )


def rate_multipliers(servers: int, rates: list[float] | None) -> np.ndarray:
    """alpha(1..L) = min(j, m) * r(j) for a station with m servers and rates r.

    Raises :class:`InputError` beyond :data:`MAX_RATE_LEVELS` levels (``Network.from_model``
    compacts such stations instead).
    """
    r = np.asarray(rates if rates else [1.0], dtype=float)
    L = max(servers, r.size)
    if L > MAX_RATE_LEVELS:
        raise InputError(
            "servers", servers, f"at most {MAX_RATE_LEVELS:,} servers (or rate levels)"
        )
    j = np.arange(1, L + 1)
    return np.minimum(j, servers) * r[np.minimum(j, r.size) - 1]


def _mean(v: float | ServiceDist) -> float:
    return v.mean_value if isinstance(v, ServiceDist) else float(v)


def _class_visits_service(
    cl: ClassSpec, c: int, index: dict[str, int], chained: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Visits and mean service times of one class (``chained``: service only; the visits of a
    class that switches come from :func:`_chain_visits`)."""
    M = len(index)
    V = np.zeros(M)
    S = np.zeros(M)
    if cl.demands is not None:
        for st, d in cl.demands.items():
            if d > 0:
                V[index[st]], S[index[st]] = 1.0, d
        return V, S
    assert cl.service is not None
    for st, s in cl.service.items():
        S[index[st]] = _mean(s)
    if cl.visits is not None:
        for st, v in cl.visits.items():
            V[index[st]] = v
    elif chained:
        return V, S
    else:
        assert cl.routing is not None
        V = _traffic_equations(cl, c, index)
    S[V == 0] = 0.0
    return V, S


def _traffic_equations(cl: ClassSpec, c: int, index: dict[str, int]) -> np.ndarray:
    """Visit ratios from a routing matrix: v = e + vP (open) or v = vP with v_ref = 1 (closed)."""
    assert cl.routing is not None
    M = len(index)
    P = np.zeros((M, M))
    for src, row in cl.routing.items():
        for dst, p in row.items():
            P[index[src], index[dst]] += p
    where = f"classes[{c}].routing"
    if cl.is_open:
        e = np.zeros(M)
        for st, p in (cl.entry or {}).items():
            e[index[st]] = p
        A = np.eye(M) - P
        try:
            v = np.linalg.solve(A.T, e)
        except np.linalg.LinAlgError:
            v = None
        if v is None or not np.all(np.isfinite(v)) or np.any(v < -1e-9):
            raise InputError(where, "routing", "an open routing from which every job can leave")
        return np.maximum(v, 0.0)
    # Closed: restrict to stations reachable from the reference, then fix v_ref = 1.
    ref = index[cl.reference] if cl.reference is not None else index[next(iter(cl.routing))]
    reach = _reachable(P, ref)
    idx = np.flatnonzero(reach)
    Pr = P[np.ix_(idx, idx)]
    r = int(np.flatnonzero(idx == ref)[0])
    A = (Pr.T - np.eye(idx.size)).copy()
    b = np.zeros(idx.size)
    A[r, :] = 0.0
    A[r, r] = 1.0
    b[r] = 1.0
    try:
        vr = np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        raise InputError(where, "routing", "an irreducible closed routing") from None
    if np.any(vr < -1e-9) or not np.allclose(vr @ Pr, vr, atol=1e-8):
        raise InputError(where, "routing", "a closed routing in which jobs always return")
    v = np.zeros(M)
    v[idx] = np.maximum(vr, 0.0)
    return v


def _chain_visits(model: Model, index: dict[str, int]) -> np.ndarray:
    """[C, M] visits as class c to station k per request of c's chain (with class switching).

    The traffic equations are solved over (class, station) pairs, each chain (classes linked by
    switching) on its own: open chains per external arrival (``v = e / sum(e) + v P``), closed
    chains relative to the reference of their first populated class (``v = v P``, ``v_ref = 1``).
    Classes that never switch get the same visits as without chains.
    """
    names = set(index)
    C, M = len(model.classes), len(index)
    cls = {cl.name: c for c, cl in enumerate(model.classes)}
    P = np.zeros((C * M, C * M))
    for c, cl in enumerate(model.classes):
        for src, st, to, p in cl.routing_targets(names):
            P[c * M + index[src], cls[to] * M + index[st]] += p
    chains = class_chains(model)
    V = np.zeros((C, M))
    for r in sorted(set(chains)):
        members = [c for c in range(C) if chains[c] == r]
        first = model.classes[members[0]]
        if len(members) == 1:
            V[members[0]] = _class_visits_service(first, members[0], index)[0]
            continue
        where = f"classes[{members[0]}].routing"
        if first.is_open:
            e = np.zeros(C * M)
            for c in members:
                for st, p in (model.classes[c].entry or {}).items():
                    e[c * M + index[st]] += (model.classes[c].arrival_rate or 0.0) * p
            if e.sum() <= 0:
                continue
            try:
                v = np.linalg.solve((np.eye(C * M) - P).T, e / e.sum())
            except np.linalg.LinAlgError:
                raise InputError(where, "routing", "an open routing jobs can leave") from None
        else:
            origin = next((c for c in members if model.classes[c].population), members[0])
            ocl = model.classes[origin]
            assert ocl.routing is not None
            ref = origin * M + index[ocl.reference or next(iter(ocl.routing))]
            reach = _reachable(P, ref)
            idx = np.flatnonzero(reach)
            A = (P[np.ix_(idx, idx)].T - np.eye(idx.size)).copy()
            b = np.zeros(idx.size)
            r0 = int(np.flatnonzero(idx == ref)[0])
            A[r0, :] = 0.0
            A[r0, r0] = 1.0
            b[r0] = 1.0
            try:
                vr = np.linalg.solve(A, b)
            except np.linalg.LinAlgError:
                raise InputError(where, "routing", "an irreducible closed routing") from None
            v = np.zeros(C * M)
            v[idx] = vr
        for c in members:
            V[c] = np.maximum(v[c * M : (c + 1) * M], 0.0)
    return V


def _reachable(P: np.ndarray, start: int) -> np.ndarray:
    seen = np.zeros(P.shape[0], dtype=bool)
    stack = [start]
    while stack:
        i = stack.pop()
        if seen[i]:
            continue
        seen[i] = True
        stack.extend(np.flatnonzero(P[i] > 0).tolist())
    return seen
