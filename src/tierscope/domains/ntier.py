"""What an n-tier system is made of, read from an experiment's resolved spec.

A tier is a set of identical replicas; each replica runs ``processes`` OS processes in one
cgroup whose CPU quota is ``cpu`` cores (None: no quota). That is all a queueing model of the
tier needs besides its measured demands: a replica serves at most min(jobs, processes) cores
at a time and at most ``cpu`` cores on average over a CFS period.

Design decision: these facts come from the run folder's ``run.json`` (the spec the runner
validated) rather than from the experiment package, so that estimation and planning read the
store only; the one rule of the runner that matters here — how many processes a replica gets
by default — is restated in :func:`default_processes` and checked against the runner by a test.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from tierscope.errors import InputError
from tierscope.progress import tracked
from tierscope.spec.experiment import (
    ComponentSpec,
    ExperimentSpec,
    TierSpec,
)
from tierscope.spec.model import Model, parse_model

#: Linux CFS bandwidth period the runner sets (cgroups.CFS_PERIOD_US).
CFS_PERIOD_S = 0.1
#: Runtime a CPU's run queue keeps when its tasks sleep (the kernel's min_cfs_rq_runtime); it
#: does not expire at the period's end since Linux 5.4, so a replica can carry it over.
CFS_MIN_RUNTIME_S = 0.001
#: The scheduler tick (CONFIG_HZ=250, the Debian and Ubuntu default, and this machine's): a
#: running task's quota overrun is noticed at the next tick.
KERNEL_TICK_S = 0.004
#: Smallest quota per replica the quota simulation is trusted with: four of the kernel's 5 ms
#: bandwidth slices per period. Below, the way the kernel hands the quota to each CPU in slices
#: (not simulated) dominates: web/app/db at 0.1/0.1/0.3 core, 30 users: p95 predicted 27 ms,
#: measured 72 ms (the app tier at 0.1 core).
MIN_MODELLED_QUOTA = 0.2
#: CPython's GIL switch interval: a Python server runs one thread for up to this long, so the
#: embedded tiers serve requests round robin with this time slice.
PYTHON_SWITCH_INTERVAL_S = 0.005


@dataclass(frozen=True)
class TierFacts:
    """One tier: its replicas, each with ``processes`` processes and a quota of ``cpu`` cores."""

    name: str
    replicas: int
    cpu: float | None
    processes: int
    quantum: float | None = None  # round-robin time slice of a request (None: PS)
    #: how often the kernel accounts a running replica's runtime against its quota (None: at
    #: every instant, so a spent quota throttles at once)
    tick: float | None = KERNEL_TICK_S

    @property
    def replica_capacity(self) -> float:
        """Cores one replica can use on average (its quota, or its processes)."""
        return min(self.cpu, self.processes) if self.cpu is not None else float(self.processes)

    @property
    def capacity(self) -> float:
        return self.replicas * self.replica_capacity

    def with_changes(self, *, replicas: int | None = None, cpu: float | None = None) -> TierFacts:
        """The tier with other replicas or quota; processes follow the quota as the runner does."""
        new = replace(self, replicas=self.replicas if replicas is None else replicas)
        if cpu is not None:
            new = replace(new, cpu=cpu, processes=default_processes(TierSpec(cpu=cpu)))
        return new


def default_processes(tier: TierSpec | ComponentSpec) -> int:
    """Processes per replica: as given, else enough for the quota (one Python process uses at
    most one core), else one (the runner's rule, ``targets.embedded.processes_for``)."""
    if tier.processes is not None:
        return tier.processes
    return max(1, math.ceil(tier.cpu)) if tier.cpu is not None else 1


def tier_facts(spec: ExperimentSpec, tiers: Sequence[str] | None = None) -> dict[str, TierFacts]:
    """Replicas, quota and processes of each component of ``spec`` (``tiers``: these only)."""
    replicas = spec.system.replicas
    embedded = spec.system.kind == "embedded"
    quantum = PYTHON_SWITCH_INTERVAL_S if embedded else None
    # The embedded tiers spend their configured CPU in ``burn``, which reads the thread's CPU
    # clock every few microseconds; each read makes the kernel account the runtime used so far
    # (task_sched_runtime -> update_curr), so a spent quota throttles at once, not at the next
    # tick as for a server that does not read its clock.
    tick = None if embedded else KERNEL_TICK_S
    given = spec.system.components
    out = {}
    for name in spec.system.graph.names if tiers is None else tiers:
        t = given[name] if given is not None else spec.system.tier(name)
        out[name] = TierFacts(name, replicas[name], t.cpu, default_processes(t), quantum, tick)
    return out


# ---- the calibrated model ----------------------------------------------------------------------
@dataclass(frozen=True)
class HostModel:
    """The machine the tiers run on: ``cores`` shared by every tier replica, the load
    generator and other processes. ``background``: cores' worth of runnable tasks of other
    processes (other work, the monitor), whatever the load; ``client_demand``: CPU seconds the
    load generator spends per request, so its share grows with the throughput.

    CFS shares the cores fairly among runnable tasks: while n tasks of the tiers run, each gets
    min(1, cores / (background + client + n)) of a core. A quota'd replica therefore runs
    slower on a busy host (and its requests queue longer) though its quota is not spent; on a
    quiet host (background + n within the cores) nothing changes.
    """

    cores: float
    background: float = 0.0
    client_demand: float = 0.0

    def competing(self, throughput: float) -> float:
        """Runnable tasks' worth of CPU besides the tiers at ``throughput`` requests/s."""
        return self.background + self.client_demand * max(throughput, 0.0)


@dataclass(frozen=True)
class TierModel:
    """A tier with its measured demand: CPU seconds per request at the tier, counting a write
    that every replica runs once (``write_demand`` of it is such a write), and the background
    cores each replica uses whatever the load.

    ``demand`` is a request's CPU when it is alone at its replica. With n requests present a
    replica burns ``slowdown(n)`` = 1 + contention x (min(n, contention_upto) - 1) times that
    (measured on the embedded tiers: 10-25 % more CPU per query when a saturated Python server
    switches among the 6-8 requests its pool lets in, against 3 context switches per query at
    light load)."""

    facts: TierFacts
    demand: float
    background: float = 0.0
    write_demand: float = 0.0
    contention: float = 0.0
    contention_upto: float = 1.0

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def total_demand(self) -> float:
        """CPU seconds per request over all replicas (each runs the writes)."""
        return self.demand + (self.facts.replicas - 1) * self.write_demand

    def slowdown(self, n: float) -> float:
        """CPU per request with ``n`` requests present at a replica, relative to ``demand``."""
        return 1.0 + self.contention * max(min(n, self.contention_upto) - 1.0, 0.0)

    @property
    def capacity(self) -> float:
        """Cores left for requests, all replicas together."""
        return max(self.facts.capacity - self.facts.replicas * self.background, 1e-9)

    @property
    def max_throughput(self) -> float:
        """Requests per second when saturated (with the most contention)."""
        d = self.total_demand * self.slowdown(self.contention_upto)
        return self.capacity / d if d > 0 else math.inf


@dataclass(frozen=True)
class NTierModel:
    """A closed n-tier system: tiers in request order, users who think ``think_time`` seconds
    between requests, a ``delay`` outside the tiers (its mean; ``delay_shape``: relative draws
    with mean 1 for its spread, else constant), and per-request demand samples (rows: requests,
    columns: tiers, CPU seconds; ``write_fraction``: the part of the last tier's demand that
    every replica of it runs). ``stalls`` repeat the run's injected stalls (the quota simulation
    freezes the replica; the product-form solvers ignore them). ``host``: the cores the tiers
    share with other processes (None: a core is free whenever a tier may run); the quota
    simulation shares them, the product-form model file and exact MVA do not (see
    :meth:`to_model`)."""

    tiers: tuple[TierModel, ...]
    think_time: float
    delay: float = 0.0
    demand_samples: Any = None  # np.ndarray [S, T] | None
    write_fraction: Any = None  # np.ndarray [S] | None
    delay_shape: Any = None  # np.ndarray [M] | None
    #: stalls (tier, 0-based replica or None for all, start, end) in every ``stall_cycle`` s
    stalls: tuple[tuple[str, int | None, float, float], ...] = ()
    stall_cycle: float = 0.0
    think_dist: str = "exp"
    period: float = CFS_PERIOD_S
    host: HostModel | None = None
    #: the measured system was given as a call graph (``system.components``), not the
    #: three-tier shorthand: its configurations are deployed with component overrides
    components: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tiers)

    def tier(self, name: str) -> TierModel:
        for t in self.tiers:
            if t.name == name:
                return t
        raise InputError("tier", name, "one of " + ", ".join(self.names))

    @property
    def has_quota(self) -> bool:
        return any(t.facts.cpu is not None for t in self.tiers)

    @property
    def max_throughput(self) -> float:
        """Throughput bound of the tiers: min over tiers of capacity / demand."""
        return min(t.max_throughput for t in self.tiers)

    def bottleneck(self) -> str:
        return min(self.tiers, key=lambda t: t.max_throughput).name

    def with_tier(self, name: str, tier: TierModel) -> NTierModel:
        self.tier(name)
        return replace(self, tiers=tuple(tier if t.name == name else t for t in self.tiers))

    def to_model(self, users: int, *, name: str | None = None) -> Model:
        """The product-form model of the system with ``users`` users (PRODUCT.md §4.1).

        One processor-sharing station per tier with the replicas as servers; a replica's rate
        multipliers are the cores it serves with j jobs (min(j, processes), capped by its quota
        less its background), so ``service`` is CPU seconds. Outside delays are a delay station
        ``outside``. A quota is read as a slower processor here (exact for throughput, pessimistic
        for response times below saturation: see :mod:`tierscope.domains._quota_sim`).

        The host's cores shared with other processes (``host``) are left out: a tier's speed
        would depend on how many tasks the *other* tiers and processes run, which no product-form
        station expresses (a separate multi-server "host" station would count each request's CPU
        twice, once at its tier and once at the host). Exact MVA is used for systems without
        quotas, whose tiers are bounded by their processes; on a busy host ``--solver quota-sim``
        shares the cores.
        """
        stations: list[dict[str, Any]] = []
        demands: dict[str, float] = {}
        for t in self.tiers:
            m = t.facts.replicas
            stations.append(
                {
                    "name": t.name,
                    "type": "queue",
                    "discipline": "ps",
                    "servers": m,
                    "rates": replica_rates(t),
                }
            )
            demands[t.name] = float(t.total_demand)
        if self.delay > 0:
            stations.append({"name": "outside", "type": "delay"})
            demands["outside"] = float(self.delay)
        doc = {
            "name": name or "n-tier",
            "stations": stations,
            "classes": [
                {
                    "name": "users",
                    "population": int(users),
                    "think_time": float(self.think_time),
                    "demands": {k: v for k, v in demands.items() if v > 0},
                }
            ],
        }
        return parse_model(doc, source="<calibrated model>")


def replica_rates(tier: TierModel) -> list[float]:
    """Rate multipliers r(j), j = 1..L, of a tier station with m = replicas servers.

    With j jobs spread evenly over m replicas, replica i holds j_i of them and serves
    min(j_i, processes) cores, at most its usable quota, and does 1 / slowdown(j_i) of a
    request's work with each CPU second (contention); alpha(j) = sum_i of that, and
    r(j) = alpha(j) / min(j, m) (the schema's alpha(j) = min(j, m) r(j)).
    """
    f = tier.facts
    per_replica = (
        max(min(f.cpu, f.processes) - tier.background, 1e-9)
        if f.cpu is not None
        else f.processes - tier.background
    )
    m = f.replicas
    out = []
    for j in range(1, m * max(f.processes, math.ceil(tier.contention_upto)) + 1):
        share = [j // m + (1 if i < j % m else 0) for i in range(m)]
        alpha = sum(min(s, f.processes, per_replica) / tier.slowdown(s) for s in share)
        out.append(alpha / min(j, m))
    # trailing equal values add nothing (the last one repeats)
    while len(out) > 1 and abs(out[-1] - out[-2]) < 1e-12:
        out.pop()
    return out


def finite(doc: Any) -> Any:
    """``doc`` with NaN and infinities as None (JSON has no such numbers)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite(v) for v in doc]
    if hasattr(doc, "item") and not isinstance(doc, str):  # numpy scalars
        return finite(doc.item())
    return doc


# ---- solving it ----------------------------------------------------------------------------------
SOLVERS = ("auto", "quota-sim", "mva")


@dataclass(frozen=True)
class Prediction:
    """The model's answer at one number of users."""

    users: int
    method: str
    throughput: float
    rt_mean: float
    rt_p50: float | None
    rt_p95: float | None
    rt_p99: float | None
    utilization: dict[str, float]  # busy cores per tier / capacity
    throughput_hw: float | None = None  # CI half-widths (simulation)
    rt_mean_hw: float | None = None
    response_times: Any = None  # np.ndarray of simulated response times
    #: throttled fraction of the periods in which a quota'd tier ran (simulation only)
    throttled: dict[str, float] | None = None
    #: mean share of a core a running task of the tiers got from the host, and the host's busy
    #: cores (the tiers' and other processes'; simulation with a host only)
    host_share: float | None = None
    host_cores: float | None = None

    def rt_quantile(self, q: float) -> float | None:
        if self.response_times is None or len(self.response_times) == 0:
            return None
        import numpy as np

        return float(np.quantile(self.response_times, q))

    def to_dict(self) -> dict[str, Any]:
        out = {
            "users": self.users,
            "method": self.method,
            "throughput": self.throughput,
            "rt_mean": self.rt_mean,
            "rt_p50": self.rt_p50,
            "rt_p95": self.rt_p95,
            "rt_p99": self.rt_p99,
            "utilization": dict(self.utilization),
        }
        if self.throughput_hw is not None:
            out["ci"] = {"throughput": self.throughput_hw, "rt_mean": self.rt_mean_hw}
        if self.throttled is not None:
            out["throttled"] = dict(self.throttled)
        if self.host_share is not None:
            out["host"] = {"share": self.host_share, "cpu_cores": self.host_cores}
        return out


def choose_solver(model: NTierModel, solver: str = "auto") -> tuple[str, str]:
    """The solver for ``model`` and why."""
    if solver not in SOLVERS:
        raise InputError("--solver", solver, "one of " + ", ".join(SOLVERS))
    if solver != "auto":
        return solver, "as asked"
    if model.has_quota:
        return "quota-sim", (
            "CPU quotas (CFS bandwidth control) are not product form: a throttled replica runs at "
            "full speed until its budget is spent, so the quota-aware simulation answers"
        )
    return "mva", "no CPU quotas: the product-form model is solved exactly (MVA)"


def predict(
    model: NTierModel,
    levels: Sequence[int],
    *,
    solver: str = "auto",
    duration: float = 120.0,
    warmup: float = 5.0,
    seed: int = 1,
) -> list[Prediction]:
    """Throughput, response times and utilisations of ``model`` at each number of users."""
    method, _ = choose_solver(model, solver)
    for users in levels:
        if users < 1:
            raise InputError("levels", users, "numbers of users >= 1")
    stage = f"predicting {len(levels)} levels ({method})"
    if method == "mva":
        todo = tracked(levels, stage) if len(levels) > 1 else levels
        return [_predict_mva(model, int(u)) for u in todo]

    def one(users: int) -> Prediction:
        return _predict_sim(model, int(users), duration=duration, warmup=warmup, seed=seed)

    # The twin releases the GIL while it runs: the levels run side by side, one per core.
    with ThreadPoolExecutor(max_workers=max(1, min(len(levels), os.cpu_count() or 1))) as pool:
        done = pool.map(one, levels)
        return list(tracked(done, stage, len(levels)) if len(levels) > 1 else done)


def _predict_mva(model: NTierModel, users: int) -> Prediction:
    from tierscope.qn import Network, solve

    sol = solve(Network.from_model(model.to_model(users)), "auto")
    X = float(sol.throughput[0])
    util = {}
    for t in model.tiers:
        k = sol.station(t.name)
        util[t.name] = float(X * t.total_demand / t.capacity) if k is not None else 0.0
    return Prediction(
        users=users,
        method="exact-mva" if sol.method == "exact" else sol.method,
        throughput=X,
        rt_mean=float(sol.response_time[0]),
        rt_p50=None,
        rt_p95=None,
        rt_p99=None,
        utilization=util,
    )


def twin_arguments(model: NTierModel, users: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What the twin (:func:`tierscope.sim.twin.simulate_closed`) simulates of ``model`` at
    ``users`` users: each tier's fields of a ``SimTier``, and the other arguments."""
    import numpy as np

    tiers = [
        {
            "name": t.name,
            "replicas": t.facts.replicas,
            "cap": float(t.facts.processes),
            "quota": t.facts.cpu,
            "background": t.background,
            "write_all": i == len(model.tiers) - 1,
            "quantum": t.facts.quantum,
            "carry": CFS_MIN_RUNTIME_S * t.facts.processes,
            "tick": t.facts.tick,
            "contention": t.contention,
            "contention_upto": t.contention_upto,
        }
        for i, t in enumerate(model.tiers)
    ]
    host = model.host
    kwargs = {
        "users": users,
        "think_time": model.think_time,
        "demand_means": np.array([t.demand for t in model.tiers]),
        "demand_samples": model.demand_samples,
        "write_fraction": model.write_fraction,
        "delay": model.delay,
        "delay_shape": model.delay_shape,
        # (a stall of a replica the changed system no longer has is gone with it)
        "stalls": [
            (model.names.index(t), r, a, b)
            for t, r, a, b in model.stalls
            if r is None or r < model.tier(t).facts.replicas
        ],
        "stall_cycle": model.stall_cycle,
        "think_dist": model.think_dist,
        "period": model.period,
        "host_cores": None if host is None else host.cores,
        "host_background": 0.0 if host is None else _competing(model, host, users),
    }
    return tiers, kwargs


def _predict_sim(
    model: NTierModel, users: int, *, duration: float, warmup: float, seed: int
) -> Prediction:
    import numpy as np

    from tierscope.domains._quota_sim import SimTier, simulate_closed

    tiers, kwargs = twin_arguments(model, users)
    out = simulate_closed(
        [SimTier(**t) for t in tiers], warmup=warmup, duration=duration, seed=seed, **kwargs
    )
    rts = out.response_times
    x_hw = r_hw = None
    if rts.size >= 20:
        # batch means over 10 consecutive batches of completions
        batches = np.array_split(rts, 10)
        means = np.array([b.mean() for b in batches])
        r_hw = float(2.262 * means.std(ddof=1) / np.sqrt(10))  # t(0.975, 9)
        x_hw = out.throughput * r_hw / max(out.rt_mean + model.think_time, 1e-12)
    q = (lambda p: out.rt_quantile(p)) if rts.size else (lambda p: None)
    return Prediction(
        users=users,
        method="quota-sim",
        throughput=out.throughput,
        rt_mean=out.rt_mean,
        rt_p50=q(0.5),
        rt_p95=q(0.95),
        rt_p99=q(0.99),
        utilization={
            t.name: out.utilization[t.name] / max(t.facts.capacity, 1e-12) for t in model.tiers
        },
        throughput_hw=x_hw,
        rt_mean_hw=r_hw,
        response_times=rts,
        throttled=out.throttled,
        host_share=out.host_share,
        host_cores=out.host_busy,
    )


def _competing(model: NTierModel, host: HostModel, users: int) -> float:
    """What competes with the tiers' requests for the host's cores at ``users`` users: other
    processes, the tiers' own background CPU, and the load generator at the throughput the
    asymptotic bounds give (min(N / (Z + delay + D), X_max)): its CPU is about 1 % of a core
    per 100 requests/s, so the bound's error near the knee is immaterial."""
    bounds = model.think_time + model.delay + sum(t.total_demand for t in model.tiers)
    x = min(users / bounds if bounds > 0 else math.inf, model.max_throughput)
    tiers_background = sum(t.background * t.facts.replicas for t in model.tiers)
    return host.competing(x if math.isfinite(x) else 0.0) + tiers_background


__all__ = [
    "CFS_MIN_RUNTIME_S",
    "CFS_PERIOD_S",
    "KERNEL_TICK_S",
    "MIN_MODELLED_QUOTA",
    "PYTHON_SWITCH_INTERVAL_S",
    "SOLVERS",
    "HostModel",
    "NTierModel",
    "Prediction",
    "TierFacts",
    "TierModel",
    "choose_solver",
    "default_processes",
    "finite",
    "predict",
    "replica_rates",
    "tier_facts",
    "twin_arguments",
]
