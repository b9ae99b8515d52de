"""A controller against a workload trace on the quota-aware twin of a calibrated system.

The twin (:class:`tierscope.sim.twin.Twin`) runs the calibrated n-tier model with the trace's
users; every ``interval`` seconds the controller sees the interval (:class:`Observation`) and
decides the replicas; a replica added serves ``startup`` seconds later (and is paid for from
the decision on), one removed takes no new request at once and finishes what it holds (and is
paid for until then). Out come the SLA satisfaction (the share of all requests answered within
the SLO's threshold, and per interval), node-hours (replica-hours of every component),
reconfigurations (decisions that changed the configuration) and the time under-provisioned
(the intervals whose requests missed the SLO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tierscope.domains.ntier import NTierModel, Prediction, twin_arguments
from tierscope.plan.control.policies import Controller, Observation
from tierscope.plan.sla import Objective
from tierscope.progress import step as progress
from tierscope.sim.twin import SimTier, Twin, TwinSystem
from tierscope.spec.trace import Trace


@dataclass
class ControlResult:
    policy: str
    slo: str
    sla_satisfaction: float
    node_hours: float
    reconfigurations: int
    under_provisioned_s: float
    intervals: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "slo": self.slo,
            "sla_satisfaction": self.sla_satisfaction,
            "node_hours": self.node_hours,
            "reconfigurations": self.reconfigurations,
            "under_provisioned_s": self.under_provisioned_s,
            "intervals": self.intervals,
        }


def _capacity(tier: SimTier) -> float:
    """Cores one replica's requests may use (its quota less background, or its processes)."""
    cores = tier.cap if tier.quota is None else min(tier.quota, tier.cap)
    return max(cores - tier.background, 1e-9)


def _interval_met(objectives: list[Objective], rts: np.ndarray) -> bool:
    """Whether the interval's requests meet every objective (none answered: not met)."""
    if rts.size == 0:
        return False
    for o in objectives:
        q = o.quantile
        v = float(rts.mean()) if q is None else float(np.quantile(rts, q))
        if not (v <= o.threshold if o.inclusive else v < o.threshold):
            return False
    return True


def twin_of(
    model: NTierModel, config: dict[str, int], most: dict[str, int], users: float
) -> TwinSystem:
    """The twin of ``model`` starting with ``config`` replicas, room for ``most``, and the
    host's other load as at ``users`` users."""
    tiers, kw = twin_arguments(model, max(round(users), 1))
    kw.pop("users")
    return TwinSystem(
        tiers=[SimTier(**(t | {"replicas": config[t["name"]]})) for t in tiers],
        max_replicas=[most[t["name"]] for t in tiers],
        **kw,
    )


def control_twin(
    model: NTierModel,
    trace: Trace,
    controller: Controller,
    *,
    objectives: list[Objective],
    initial: dict[str, int],
    most: dict[str, int],
    interval: float = 30.0,
    startup: float = 30.0,
    seed: int = 1,
) -> ControlResult:
    """Runs ``controller`` over ``trace`` on the twin of ``model`` (see the module notes)."""
    system = twin_of(model, initial, most, trace.mean())
    steps = [(float(t), round(load)) for t, load in zip(trace.times, trace.loads, strict=True)]
    twin = Twin(system, users=steps, seed=seed, window=1.0)
    threshold = objectives[0].threshold
    names = [t.name for t in system.tiers]
    config = dict(initial)
    starting: dict[str, tuple[float, int]] = {}  # component: (serving from, replicas before)
    loads: list[float] = []
    rows, within, answered, reconfigurations = [], 0, 0, 0
    node_s, under = 0.0, 0.0
    n = math.ceil(trace.end / interval - 1e-9)
    for k in range(n):
        a, b = k * interval, min((k + 1) * interval, trace.end)
        st = twin.advance(b)
        # Replicas serving in the interval (new ones still starting do not)
        running = {c: starting[c][1] if c in starting and starting[c][0] > a else config[c]
                   for c in names}  # fmt: skip
        starting = {c: s for c, s in starting.items() if s[0] > b}
        node_s += sum(config.values()) * (b - a)
        rts = st.rt
        ok = rts <= threshold
        within += int(ok.sum())
        answered += rts.size
        edges = np.arange(a, b + 1e-9, 1.0)
        per_second = np.histogram(st.done, bins=edges)[0].astype(float)
        good = np.histogram(st.done[ok], bins=edges)[0]
        sla_s = np.where(per_second > 0, good / np.maximum(per_second, 1), np.nan)
        span = max(b - a, 1e-9)
        utilization = {
            c: float(st.cpu[:, i].sum()) / span / (running[c] * _capacity(system.tiers[i]))
            for i, c in enumerate(names)
        }
        load = trace.at(a)
        loads.append(load)
        met = _interval_met(objectives, rts)
        under += 0.0 if met else span
        sla = float(ok.mean()) if rts.size else 0.0
        rows.append(
            {
                "t": a,
                "load": load,
                "config": dict(config),
                "running": running,
                "sla": sla,
                "throughput": rts.size / span,
                "met": met,
            }
        )
        obs = Observation(
            t=b,
            interval=span,
            load=load,
            config=dict(config),
            running=running,
            throughput=rts.size / span,
            utilization=utilization,
            sla=sla,
            sensitive_sla=float((rts <= threshold / 2).mean()) if rts.size else 0.0,
            per_second=per_second,
            sla_per_second=sla_s,
            loads=tuple(loads),
            horizon=startup + interval,
        )
        decided = controller.decide(obs)
        if decided != config and b < trace.end:
            reconfigurations += 1
            for c in names:
                new, old = decided[c], config[c]
                if new > old:
                    twin.scale(c, new, at=b + startup)
                    starting[c] = (b + startup, running[c])
                elif new < old:
                    # (a replica still starting stops when it would have started)
                    when = max(b, starting.get(c, (b, 0))[0])
                    twin.scale(c, new, at=when)
            config = dict(decided)
        progress(f"control ({controller.name})", k + 1, n)
    return ControlResult(
        policy=controller.name,
        slo=", ".join(str(o) for o in objectives),
        sla_satisfaction=within / answered if answered else 0.0,
        node_hours=node_s / 3600.0,
        reconfigurations=reconfigurations,
        under_provisioned_s=under,
        intervals=rows,
    )


def model_meets(
    model: NTierModel,
    objectives: list[Objective],
    *,
    duration: float = 60.0,
    seed: int = 1,
) -> Any:
    """``meets(config, users)``: whether the calibrated model with those replicas meets the
    objectives at that load (answers cached per configuration and whole number of users)."""
    from tierscope.domains.ntier import predict
    from tierscope.plan.sla import slo_met

    cache: dict[tuple, bool] = {}

    def meets(config: dict[str, int], users: float) -> bool:
        u = max(round(users), 0)
        key = (tuple(sorted(config.items())), u)
        if key not in cache:
            if u == 0:
                cache[key] = True
            else:
                m = model
                for t in model.tiers:
                    m = m.with_tier(
                        t.name, replace(t, facts=t.facts.with_changes(replicas=config[t.name]))
                    )
                p: Prediction = predict(m, [u], duration=duration, seed=seed)[0]
                cache[key] = slo_met(objectives, p)
        return cache[key]

    return meets


__all__ = ["ControlResult", "control_twin", "model_meets", "twin_of"]
