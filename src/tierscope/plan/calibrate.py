"""Calibrate a queueing model of a measured n-tier system and validate it against the sweep.

From a run folder of the embedded (or any web/app/db) system: the topology, quotas, processes
and injected stalls come from the run's spec; the CPU demand of every request at every tier
from complete information (the measured CPU of each node shared among the requests present),
averaged per interaction so that the interaction mix is kept; the mean demand and each tier's
background CPU from the utilisation law with an intercept (UBR), to which the per-request
demands are scaled; the think time from the closed-loop law N = X (Z + R) at unsaturated
levels (it includes the client's own time between requests); the time spent outside the tiers
(network, client, wake-ups), whose mean makes the model match the lightly loaded levels and
whose spread is theirs. A tier that served its saturated levels with more CPU per request than
its light ones gets a contention law (CPU per request growing with the requests present,
:class:`tierscope.domains.ntier.TierModel`), fitted on the sweep's levels; its demand is then
the CPU of a request served alone. The host: its cores (the run's host facts) and the CPU other
processes used on it during the sweep (the host's busy cores less the tiers' and the load
generator's, the median over the run's levels), which the tiers' tasks share the cores with
(:class:`tierscope.domains.ntier.HostModel`).

Design decision: every measured level is *predicted*, none is fitted except the lightly loaded
levels' response times (through the outside delay), so the validation table is an honest
out-of-sample check at the knee and beyond. The solver is the best available
(:func:`tierscope.domains.ntier.choose_solver`): the quota-aware simulation when tiers have CPU
quotas, exact MVA otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from tierscope.domains.ntier import (
    HostModel,
    NTierModel,
    Prediction,
    TierModel,
    choose_solver,
    finite,
    predict,
    tier_facts,
)
from tierscope.errors import InputError
from tierscope.estimate import CI, UBR, observations_from_run
from tierscope.spec.experiment import ExperimentSpec
from tierscope.store import Run

#: Levels whose busiest tier is below this utilisation estimate the think time.
UNSATURATED = 0.8
#: Levels whose busiest tier is below this utilisation fit the outside delay.
LIGHT = 0.5
#: UBR and CI mean demands may disagree this much before UBR is distrusted.
AGREEMENT = 0.3
#: A contention law needs this many level runs with two or more requests per replica at the
#: tier, and as many with fewer, and a slope this many standard errors above zero.
CONTENTION_ROWS = 2
CONTENTION_T = 3.0
#: A level whose host was this busy (of its cores) was saturated: CPU accounting then shows
#: what other processes got, not what they wanted.
SATURATED_HOST = 0.97


@dataclass
class Calibration:
    """A calibrated model, its predictions at the measured levels and the errors."""

    model: NTierModel
    setup: str
    solver: str
    solver_reason: str
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    estimates: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def model_document(self, users: int | None = None) -> dict[str, Any]:
        """The product-form model file (PRODUCT.md §4.1) at ``users`` (default: top level)."""
        top = users or int(max(r["level"] for r in self.rows))
        m = self.model.to_model(top, name=f"calibrated-{self.setup}")
        return m.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)

    def to_dict(self) -> dict[str, Any]:
        return finite(
            {
                "setup": self.setup,
                "solver": self.solver,
                "solver_reason": self.solver_reason,
                "model": model_summary(self.model),
                "estimates": self.estimates,
                "levels": self.rows,
                "summary": self.summary,
                "notes": list(self.notes),
            }
        )


def model_summary(model: NTierModel) -> dict[str, Any]:
    host = model.host
    return {
        "tiers": {
            t.name: {
                "replicas": t.facts.replicas,
                "cpu": t.facts.cpu,
                "processes": t.facts.processes,
                "demand": t.demand,
                "write_demand": t.write_demand,
                "background": t.background,
                "contention": t.contention,
                "contention_upto": t.contention_upto,
                "max_throughput": t.max_throughput,
            }
            for t in model.tiers
        },
        "think_time": model.think_time,
        "outside_delay": model.delay,
        "max_throughput": model.max_throughput,
        "bottleneck": model.bottleneck(),
        "host": None
        if host is None
        else {
            "cores": host.cores,
            "background": host.background,
            "client_demand": host.client_demand,
        },
    }


def measured_levels(run: Run, setup: str) -> pl.DataFrame:
    """Each level over its repetitions: level, throughput and tier utilisations (means, which
    the operational laws relate), rt_mean, rt_p95 and rt_p99 (medians: one repetition stretched
    by a disturbance of the host must not move its level)."""
    assert run.points is not None
    pts = run.points.filter(pl.col("setup") == setup)
    util_cols = [c for c in pts.columns if c.endswith((".cpu_cores", ".cpu_throttled_ratio"))]
    return (
        pts.group_by("level")
        .agg(
            pl.col("throughput").mean(),
            pl.col("rt_mean").median(),
            pl.col("rt_p95").median(),
            pl.col("rt_p99").median(),
            pl.len().alias("reps"),
            *[pl.col(c).mean() for c in util_cols],
        )
        .sort("level")
    )


def _interaction_demands(
    run: Run, requests: pl.Series, samples: np.ndarray, *, paths: bool = False
) -> tuple[np.ndarray, bool]:
    """Per-request demand rows (``samples``: [requests, stations]) replaced by their
    interaction's mean, where the run records interactions (else unchanged). With ``paths``
    (a call graph), requests of one interaction are told apart by their path too: how often
    they visited each component (a request that skipped a branch of ``p`` < 1 used none of
    its CPU; the mean would give every request a part of it).

    Why: complete information shares each 50 ms CPU sample among the requests present in it,
    which is right on average but not for single requests: on the embedded system, whose tiers
    burn a fixed CPU time per query, the demands within one interaction came out with a
    coefficient of variation of 0.55-0.7. Fed to the quota simulation, that spread makes the
    CPU used per 100 ms period burstier than it is, so the simulated tier is throttled too
    early (15 % of periods against 5 % measured at 60 % of a 0.2-core quota) and the response
    time near the knee comes out 25-45 % high. The spread of real response times at light load
    is kept, but outside the CPU, in the outside delay (:func:`_delay_shape`); the mix of
    interactions, and the real differences between them, are kept. (On the shop graph,
    payment on 80 % of the paths: every request at the mean made the simulated payment, capped
    at 0.1 core, throttled in 37 % of its periods against 52 % measured.)
    """
    if run.requests is None or "interaction" not in run.requests.columns:
        return samples, False
    names = (
        run.requests.filter(pl.col("tier") == "client")
        .select(pl.col("request_id").alias("request"), "interaction")
        .unique("request")
    )
    if paths:
        visited = (
            run.requests.filter(pl.col("tier") != "client")
            .group_by("request_id", "tier")
            .len()
            .sort("tier")
            .group_by("request_id")
            .agg((pl.col("tier") + "x" + pl.col("len").cast(pl.String)).str.join(",").alias("p"))
            .rename({"request_id": "request"})
        )
        names = (
            names.join(visited, on="request", how="left")
            .with_columns(pl.col("interaction") + "|" + pl.col("p").fill_null(""))
            .drop("p")
        )
    joined = (
        pl.DataFrame({"request": requests})
        .with_columns(pl.Series(f"d{k}", samples[:, k]) for k in range(samples.shape[1]))
        .join(names, on="request", how="left", maintain_order="left")
    )
    if joined["interaction"].null_count() > 0 or joined.height != len(requests):
        return samples, False
    cols = [f"d{k}" for k in range(samples.shape[1])]
    return joined.select(pl.col(c).mean().over("interaction") for c in cols).to_numpy(), True


@dataclass(frozen=True)
class Contention:
    """A tier's CPU against the requests present per replica, n: each request burns
    ``alone x (1 + per_request x (min(n, upto) - 1))`` CPU seconds, and the tier
    ``background`` cores besides."""

    alone: float
    per_request: float
    upto: float
    background: float


def _contention(points: pl.DataFrame, tier: str, replicas: int) -> Contention | None:
    """The contention law of ``tier`` from the level runs in ``points`` (one row per level
    and repetition), or None if its CPU per request did not grow with the requests present.

    Each row gives the tier's CPU, its throughput X and the mean requests present per replica,
    n; with x = max(n - 1, 0), cpu = background + alone X + alone c X x is linear in its three
    unknowns. (The utilisation law's straight line, cpu = background + D X, cannot hold when a
    saturated tier serves fewer requests with the same CPU: it mistakes the growth for
    background.)
    """
    cols = [f"{tier}.cpu_cores", f"{tier}.queue_length", "throughput"]
    if any(c not in points.columns for c in cols):
        return None
    df = points.select(cols).drop_nulls().filter(pl.col("throughput") > 0)
    cpu, x_s = df[cols[0]].to_numpy(), df["throughput"].to_numpy()
    n = df[cols[1]].to_numpy() / replicas
    x = np.maximum(n - 1.0, 0.0)
    if (x >= 1).sum() < CONTENTION_ROWS or (x < 1).sum() < CONTENTION_ROWS:
        return None
    design = np.column_stack([np.ones_like(x_s), x_s, x_s * x])
    coef = np.linalg.lstsq(design, cpu, rcond=None)[0]
    if coef[0] < 0:  # a negative background: none instead
        design = design[:, 1:]
        coef = np.concatenate([[0.0], np.linalg.lstsq(design, cpu, rcond=None)[0]])
    background, alone, growth = (float(v) for v in coef)
    dof = len(cpu) - design.shape[1]
    if alone <= 0 or dof < 1:
        return None
    sigma2 = float(((cpu - design @ coef[-design.shape[1] :]) ** 2).sum()) / dof
    se = math.sqrt(sigma2 * max(float(np.linalg.inv(design.T @ design)[-1, -1]), 0.0))
    if not growth > CONTENTION_T * se:
        return None
    return Contention(alone, growth / alone, float(n.max()), background)


def build_model(
    run: Run, *, setup: str | None = None, window: float = 1.0
) -> tuple[NTierModel, dict[str, Any], list[str]]:
    """The calibrated model of one setup of ``run`` (before the outside delay is fitted),
    the estimates it rests on, and notes."""
    assert run.points is not None
    setup = setup or run.points["setup"][0]
    source = str(run.path)
    spec = run.setup(setup)
    if spec.system.kind in ("kafka", "cassandra"):
        raise InputError(
            "system.kind",
            spec.system.kind,
            "a run of tiers (embedded, webstack, attach): a cluster's model is its domain's "
            f"(docs/{spec.system.kind}.md)",
            source=source,
        )
    if spec.workload_mode != "closed":
        raise InputError(
            "workload.mode",
            spec.workload_mode,
            "a closed workload (users and think time)",
            source=source,
        )
    obs = observations_from_run(run, window=window, setup=setup)
    notes = list(obs.notes)
    ci = CI(n_boot=0).fit(obs)
    samples = ci.request_demands_.select(obs.stations).to_numpy()
    ci_mean = samples.mean(axis=0)
    ubr = UBR(background=True, n_boot=0).fit(obs)
    facts = tier_facts(spec, obs.stations)
    demand = ubr.demands_[:, 0].copy()
    background = ubr.background_.copy()
    for k, st in enumerate(obs.stations):
        if not (ci_mean[k] > 0 and abs(demand[k] / ci_mean[k] - 1) <= AGREEMENT):
            notes.append(
                f"{st}: the utilisation law ({demand[k]:.3g} s) and the request records "
                f"({ci_mean[k]:.3g} s) disagree; the records' demand is used, no background"
            )
            demand[k], background[k] = ci_mean[k], 0.0
    # The demands above are means over the sweep: with contention, of requests served with
    # others present. Such a tier's demand is a request's alone; the law adds the rest.
    points = run.points.filter(pl.col("setup") == setup)
    contention = {st: _contention(points, st, facts[st].replicas) for st in obs.stations}
    for k, st in enumerate(obs.stations):
        c = contention[st]
        if c is not None:
            demand[k], background[k] = c.alone, c.background
            notes.append(
                f"{st}: CPU per request grows {c.per_request:.1%} with each other request "
                f"present (measured up to {c.upto:.1f} per replica): {c.alone * 1e3:.3g} ms "
                f"alone, {c.alone * (1 + c.per_request * (c.upto - 1)) * 1e3:.3g} ms saturated"
            )
    # A replicated last tier runs every write at each replica: split its demand into the
    # single copy a request needs and the write part each replica repeats.
    last = len(obs.stations) - 1
    m = facts[obs.stations[last]].replicas
    write_total = _write_demand(obs, ci.request_demands_["request"])
    copy = samples[:, last] - write_total * (m - 1) / m
    single_mean = float(copy.mean())
    demand_single = demand.copy()
    if ci_mean[last] > 0:
        demand_single[last] = demand[last] * single_mean / ci_mean[last]
    write_fraction = np.divide(write_total / m, copy, out=np.zeros_like(copy), where=copy > 0)
    samples[:, last] = copy
    mean_now = samples.mean(axis=0)
    scale = np.where(mean_now > 0, demand_single / np.where(mean_now > 0, mean_now, 1), 0.0)
    samples = samples * scale[None, :]
    write_demand = float((write_fraction * samples[:, last]).mean())
    by_interaction = False
    if write_demand == 0:
        # (the split of writes needs each request's own demand: it keeps them)
        graph = not spec.system.is_shorthand
        samples, by_interaction = _interaction_demands(
            run, ci.request_demands_["request"], samples, paths=graph
        )
        if by_interaction:
            notes.append(
                f"each request's demands are its interaction's{' and path' if graph else ''} "
                "means (sharing 50 ms CPU samples among requests overstates the spread within "
                "an interaction)"
            )
    if m == 1 and spec.workload.get("mix") == "read-write":
        notes.append(
            f"one {obs.stations[last]} replica: its writes cannot be told from its reads, so "
            "a prediction with more replicas assumes every query runs at one replica only"
        )
    # (contention, up to): none is (0, 1)
    laws = {st: (c.per_request, c.upto) if c else (0.0, 1.0) for st, c in contention.items()}
    tiers = tuple(
        TierModel(
            facts[st],
            float(demand_single[k]),
            float(background[k]) / facts[st].replicas,
            write_demand if k == last else 0.0,
            *laws[st],
        )
        for k, st in enumerate(obs.stations)
    )
    levels = measured_levels(run, setup)
    think, think_note = _think_time(levels, tiers)
    notes.append(think_note)
    stalls, cycle = _stall_schedule(spec)
    if stalls:
        notes.append(
            f"{len(stalls)} injected stall(s) in each {cycle:g} s steady window are repeated "
            "in the simulation (a stalled replica runs nothing)"
        )
    if any(f.kind == "cpu_hog" for f in spec.faults):
        notes.append("injected cpu_hog faults are not modelled: their CPU counts as demand")
    host, host_estimates, host_note = _host(run)
    if host_note:
        notes.append(host_note)
    model = NTierModel(
        tiers=tiers,
        think_time=think,
        demand_samples=samples,
        write_fraction=write_fraction if write_demand > 0 else None,
        stalls=stalls,
        stall_cycle=cycle,
        host=host,
        components=not spec.system.is_shorthand,
    )
    estimates = {
        "demand_ubr": {st: float(ubr.demands_[k, 0]) for k, st in enumerate(obs.stations)},
        "background_ubr": {st: float(ubr.background_[k]) for k, st in enumerate(obs.stations)},
        "demand_ci": {st: float(ci_mean[k]) for k, st in enumerate(obs.stations)},
        "demands_by_interaction": by_interaction,
        "contention": {
            st: {"alone": c.alone, "per_request": c.per_request, "upto": c.upto}
            for st, c in contention.items()
            if c is not None
        },
        "requests": int(samples.shape[0]),
        "windows": obs.n_windows,
        "unit": "cpu_s",
    }
    if host_estimates:
        estimates["host"] = host_estimates
    return model, estimates, notes


def _others(points: pl.DataFrame) -> pl.DataFrame:
    """Per point: the cores other processes used (``others``: the host's busy cores
    less every monitored node's and the load generator's) and the load generator's CPU per
    request (``client``)."""
    nodes = [
        c
        for c in points.columns
        if c.endswith(".cpu_cores") and not c.startswith(("host.", "client."))
    ]
    client = pl.col("client.cpu_cores") if "client.cpu_cores" in points.columns else pl.lit(0.0)
    return points.select(
        (pl.col("host.cpu_cores") - pl.sum_horizontal(nodes) - client).alias("others"),
        (client / pl.col("throughput")).alias("client"),
    )


def _host(run: Run) -> tuple[HostModel | None, dict[str, Any], str | None]:
    """The host the tiers ran on, its estimates and a note; None where the run did not measure
    the host's CPU (a simulated sweep) or ran on several hosts.

    Other processes' CPU at each level (point) is the host's busy cores less every monitored
    node's and the load generator's; its median over all the run's points (every setup: they
    share the host) is the background — a level or two disturbed by a burst of other work does
    not move it. The load generator's CPU per request is the median of its cores over the
    throughput, so its share grows with the load. On a host saturated at every level the
    background is what other processes *got*, less than they wanted: a lower bound.
    """
    assert run.points is not None
    facts = run.info.get("host") or {}
    cores = facts.get("usable_cores") or facts.get("cores")
    pts = run.points
    if "host.cpu_cores" not in pts.columns or not cores:
        return None, {}, None
    if len(run.info.get("hosts") or {}) > 1:
        return None, {}, "the tiers ran on several hosts: sharing a host's cores is not modelled"
    per_point = _others(pts).filter(pl.col("others").is_not_null() & pl.col("others").is_finite())
    if per_point.height == 0:
        return None, {}, None
    others = per_point["others"].to_numpy()
    busy = pts["host.cpu_cores"].drop_nulls().to_numpy()
    saturated = int((busy >= SATURATED_HOST * float(cores)).sum())
    client_per = per_point.filter(pl.col("client").is_finite())["client"].to_numpy()
    background = max(float(np.median(others)), 0.0)
    client_demand = max(float(np.median(client_per)), 0.0) if client_per.size else 0.0
    host = HostModel(float(cores), background, client_demand)
    estimates = {
        "cores": host.cores,
        "background": background,
        "background_range": [float(others.min()), float(others.max())],
        "client_demand": client_demand,
        "points": int(others.size),
        "saturated_points": saturated,
    }
    note = (
        f"host: {host.cores:g} cores, {background:.2g} cores used by other processes during the "
        f"sweep (median of {others.size} levels, {others.min():.2g} to {others.max():.2g}; "
        f"the load generator besides: {client_demand * 1e3:.2g} ms of CPU per request); the "
        "tiers' running tasks share the cores with them (what-if: host.background=0 for a "
        "quiet machine)"
    )
    if saturated * 2 > busy.size:
        note += (
            f"; the host was saturated at {saturated} of {busy.size} levels, where other "
            "processes got less CPU than they wanted: the background is a lower bound and the "
            "response times near the knee may be predicted low"
        )
    return host, estimates, note


def _stall_schedule(
    spec: ExperimentSpec,
) -> tuple[tuple[tuple[str, int | None, float, float], ...], float]:
    """The injected stalls of one level's steady window, relative to its start, and the
    window's length: the cycle the simulation repeats (the runner injects the same faults at
    every level, timed from the level's start)."""
    a, b = spec.phases.ramp_up, spec.phases.ramp_up + spec.phases.steady
    out = []
    for f in spec.faults:
        if f.kind != "stall":
            continue
        for s, e in f.windows(b):
            if e > a and s < b:
                replica = None if f.replica is None else f.replica - 1
                out.append((f.tier, replica, max(s, a) - a, min(e, b) - a))
    return tuple(out), float(spec.phases.steady)


def _write_demand(obs: Any, requests: pl.Series) -> np.ndarray:
    """CPU seconds of each request's writes at the last tier, all replicas together."""
    from tierscope.estimate.ci import segment_demands

    assert obs.records is not None
    seg = obs.records.segments
    if "write" not in seg.columns or not seg["write"].any():
        return np.zeros(requests.len())
    seg = seg.with_columns(pl.Series("demand", segment_demands(obs.records)))
    per = (
        seg.filter(pl.col("write") & (pl.col("station") == obs.stations[-1]))
        .group_by("request")
        .agg(pl.col("demand").sum())
    )
    joined = pl.DataFrame({"request": requests}).join(per, on="request", how="left")
    return joined["demand"].fill_null(0.0).to_numpy()


def _think_time(levels: pl.DataFrame, tiers: tuple[TierModel, ...]) -> tuple[float, str]:
    """Z from N = X (Z + R) at levels where no tier is near saturation."""
    zs, all_zs = [], []
    for r in levels.iter_rows(named=True):
        if not (r["throughput"] > 0 and math.isfinite(r["rt_mean"] or math.nan)):
            continue
        z = r["level"] / r["throughput"] - r["rt_mean"]
        all_zs.append(z)
        busiest = max((r.get(f"{t.name}.cpu_cores") or 0.0) / max(t.capacity, 1e-12) for t in tiers)
        if busiest < UNSATURATED:
            zs.append(z)
    pool = zs or all_zs
    if not pool:
        raise InputError("points", "throughput", "levels with completed requests")
    z = max(float(np.median(pool)), 0.0)
    return z, f"think time {z:.4g} s from N = X (Z + R) at {len(pool)} unsaturated level(s)"


def fit_model(
    run: Run,
    *,
    setup: str | None = None,
    window: float = 1.0,
    solver: str = "auto",
    seed: int = 1,
) -> tuple[NTierModel, dict[str, Any], list[str]]:
    """The calibrated model of one setup of ``run``, with the outside delay fitted to the
    lightly loaded levels; also the estimates it rests on and notes."""
    assert run.points is not None
    setup = setup or run.points["setup"][0]
    model, estimates, notes = build_model(run, setup=setup, window=window)
    method, _ = choose_solver(model, solver)
    levels = measured_levels(run, setup)
    light = _light_levels(levels, model)
    base = predict(model, light["users"], solver=method, duration=400.0, seed=seed)
    residual = [float(r) - p.rt_mean for r, p in zip(light["rt"], base, strict=True)]
    delay = max(0.0, float(np.median(residual)))
    # Per-request demands carry their own spread; interaction means leave it to the delay.
    by_interaction = estimates["demands_by_interaction"]
    shape = _delay_shape(run, setup, light["users"]) if by_interaction else None
    model = replace(model, delay=delay, delay_shape=shape)
    used = ", ".join(str(u) for u in light["users"])
    notes.append(
        f"outside delay {delay * 1e3:.3g} ms on average (network, client, wake-ups): the median "
        f"of what the tiers leave of the response time at {used} users (busiest tier below "
        f"{LIGHT:.0%}); every level is predicted with it"
        + (
            f", spread like the light levels' response times beyond their interaction's "
            f"fastest ({len(shape)} requests)"
            if shape is not None
            else ""
        )
    )
    estimates["outside_delay_levels"] = light["users"]
    return model, estimates, notes


def _delay_shape(run: Run, setup: str, users: list[int]) -> np.ndarray | None:
    """Relative spread of the outside delay (mean 1), from the lightly loaded levels: how much
    longer than its interaction's fastest requests (5th percentile) each request took.

    Why there: at light load nothing queues, so what varies between requests of one interaction
    (whose CPU demands are fixed in the model) is time outside the CPU quota — wake-ups, the
    network, the GIL — which delays a request but does not spend its tier's CPU budget.
    Requests that overlap an injected stall are left out (the simulation has the stalls).
    """
    if run.requests is None:
        return None
    assert run.points is not None
    client = run.requests.filter((pl.col("tier") == "client") & (pl.col("status") == "ok"))
    windows = run.points.filter(
        (pl.col("setup") == setup) & pl.col("level").is_in([float(u) for u in users])
    ).select("t_start", "t_end")
    # the requests each point's statistics come from: those ending in its steady window
    req = pl.concat(
        [client.filter((pl.col("end") >= a) & (pl.col("end") < b)) for a, b in windows.rows()]
        or [client.clear()]
    )
    if run.events is not None:
        for a, b in run.events.filter(pl.col("kind") == "stall").select("t_start", "t_end").rows():
            req = req.filter((pl.col("end") <= a) | (pl.col("start") >= b))
    if req.height < 50:
        return None
    has_names = "interaction" in req.columns and req["interaction"].null_count() == 0
    by = "interaction" if has_names else None
    rt = pl.col("end") - pl.col("start")
    floor = rt.quantile(0.05).over(by) if by else rt.quantile(0.05)
    excess = req.select((rt - floor).clip(lower_bound=0.0)).to_series().to_numpy()
    mean = float(excess.mean())
    return excess / mean if mean > 0 else None


def _light_levels(levels: pl.DataFrame, model: NTierModel) -> dict[str, list]:
    """The levels whose busiest tier is below LIGHT (at least the lowest level)."""
    users, rts = [], []
    for i, r in enumerate(levels.iter_rows(named=True)):
        busiest = max(r["throughput"] * t.total_demand / t.capacity for t in model.tiers)
        if (busiest < LIGHT or i == 0) and math.isfinite(r["rt_mean"] or math.nan):
            users.append(round(r["level"]))
            rts.append(r["rt_mean"])
    return {"users": users, "rt": rts}


def calibrate(
    run: Run,
    *,
    setup: str | None = None,
    window: float = 1.0,
    solver: str = "auto",
    duration: float = 300.0,
    seed: int = 1,
) -> Calibration:
    """Calibrate the model of ``run`` and predict every measured level."""
    assert run.points is not None
    setup = setup or run.points["setup"][0]
    model, estimates, notes = fit_model(run, setup=setup, window=window, solver=solver, seed=seed)
    method, why = choose_solver(model, solver)
    levels = measured_levels(run, setup)
    users = [round(v) for v in levels["level"].to_list()]
    preds = predict(model, users, solver=method, duration=duration, seed=seed)
    rows = [comparison_row(r, p) for r, p in zip(levels.iter_rows(named=True), preds, strict=True)]
    summary = accuracy_summary(rows, model)
    notes.extend(_validation_advice(summary, levels))
    return Calibration(
        model=model,
        setup=setup,
        solver=method,
        solver_reason=why,
        rows=rows,
        summary=summary,
        estimates=estimates,
        notes=notes,
    )


#: Above this growth of the measured mean response time between the two levels that 70 % of the
#: peak is read between, a few ms of noise at one level move the compared value by 10-20 %.
STEEP_RT_GROWTH = 1.5


def _validation_advice(summary: dict[str, Any], levels: pl.DataFrame) -> list[str]:
    """What the sweep lacks for a trustworthy comparison at 70 % of the peak, and what to add."""
    at70 = summary.get("rt_at_70pct_peak")
    if at70 is None:
        return [
            "no sweep level below 70 % of the measured peak before it: the mean response time "
            "there cannot be compared (add lighter levels)"
        ]
    lo, hi = at70["between_levels"]
    by_level = dict(zip(levels["level"].to_list(), levels.iter_rows(named=True), strict=True))
    r_lo, r_hi = by_level[lo]["rt_mean"], by_level[hi]["rt_mean"]
    out = []
    if r_hi > STEEP_RT_GROWTH * r_lo:
        step = max(1, round((hi - lo) / 4))
        extra = ", ".join(f"{u:g}" for u in np.arange(lo + step, hi, step)[:3])
        fix = f"add levels such as {extra}" if extra else "repeat them"
        out.append(
            f"70 % of the peak lies between {lo:g} and {hi:g} users, where the measured mean "
            f"response time grows from {1e3 * r_lo:.3g} to {1e3 * r_hi:.3g} ms: the value "
            f"compared there is interpolated across the knee ({fix})"
        )
    if min(by_level[lo]["reps"], by_level[hi]["reps"]) < 2:
        out.append(
            "the levels around 70 % of the peak were measured once: one window's noise near the "
            "knee is 10-30 % of the response time (sweep.repetitions: 2 or 3 for a validation)"
        )
    return out


def comparison_row(measured: dict[str, Any], p: Prediction) -> dict[str, Any]:
    """One level of the validation table."""
    x_m, r_m = measured["throughput"], measured["rt_mean"]
    return {
        "level": measured["level"],
        "measured": {
            "throughput": x_m,
            "rt_mean": r_m,
            "rt_p95": measured.get("rt_p95"),
            "rt_p99": measured.get("rt_p99"),
            "throttled": {
                k.removesuffix(".cpu_throttled_ratio"): v
                for k, v in measured.items()
                if k.endswith(".cpu_throttled_ratio") and v is not None
            },
            "host_cpu_cores": measured.get("host.cpu_cores"),
        },
        "predicted": p.to_dict(),
        "error": {
            "throughput": _rel(p.throughput, x_m),
            "rt_mean": _rel(p.rt_mean, r_m),
            "rt_p95": _rel(p.rt_p95, measured.get("rt_p95")),
        },
    }


def _rel(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not (meas > 0) or not math.isfinite(pred):
        return None
    return float((pred - meas) / meas)


def accuracy_summary(rows: list[dict[str, Any]], model: NTierModel) -> dict[str, Any]:
    """Peak throughput and the mean response time at 70 % of the measured peak, measured vs
    predicted, with relative errors (the acceptance numbers of a calibration)."""
    lv = np.array([r["level"] for r in rows], dtype=float)
    xm = np.array([r["measured"]["throughput"] for r in rows])
    xp = np.array([r["predicted"]["throughput"] for r in rows])
    rm = np.array([r["measured"]["rt_mean"] for r in rows])
    rp = np.array([r["predicted"]["rt_mean"] for r in rows])
    peak_m, peak_p = float(xm.max()), float(xp.max())
    out: dict[str, Any] = {
        "peak_throughput": {
            "measured": peak_m,
            "predicted": peak_p,
            "error": _rel(peak_p, peak_m),
            "model_bound": model.max_throughput,
        },
        "mean_abs_error": {
            "throughput": float(np.mean(np.abs(xp / xm - 1))),
            "rt_mean": float(np.mean(np.abs(rp / rm - 1))),
        },
    }
    target = 0.7 * peak_m
    i_peak = int(np.argmax(xm))
    below = np.flatnonzero(xm[: i_peak + 1] <= target)
    if below.size and below[-1] < i_peak:
        # Both curves are read at the same number of users, linearly between the two sweep
        # levels around 70 % of the measured peak, so they are compared like for like.
        i = int(below[-1])
        f = (target - xm[i]) / (xm[i + 1] - xm[i])
        r_meas = float(rm[i] + f * (rm[i + 1] - rm[i]))
        r_pred = float(rp[i] + f * (rp[i + 1] - rp[i]))
        out["rt_at_70pct_peak"] = {
            "users": float(lv[i] + f * (lv[i + 1] - lv[i])),
            "throughput": target,
            "measured": r_meas,
            "predicted": r_pred,
            "error": _rel(r_pred, r_meas),
            "between_levels": [float(lv[i]), float(lv[i + 1])],
        }
    return out


def model_vs_measurement(cal: Calibration) -> dict[str, list[Any]]:
    """Columns for a "model vs measurement" figure: one entry per measured level."""
    rows = cal.rows
    return finite(
        {
            "level": [r["level"] for r in rows],
            "measured_throughput": [r["measured"]["throughput"] for r in rows],
            "predicted_throughput": [r["predicted"]["throughput"] for r in rows],
            "predicted_throughput_hw": [
                (r["predicted"].get("ci") or {}).get("throughput") for r in rows
            ],
            "measured_rt_mean": [r["measured"]["rt_mean"] for r in rows],
            "predicted_rt_mean": [r["predicted"]["rt_mean"] for r in rows],
            "predicted_rt_mean_hw": [(r["predicted"].get("ci") or {}).get("rt_mean") for r in rows],
            "measured_rt_p95": [r["measured"]["rt_p95"] for r in rows],
            "predicted_rt_p95": [r["predicted"]["rt_p95"] for r in rows],
        }
    )


__all__ = [
    "Calibration",
    "build_model",
    "calibrate",
    "fit_model",
    "measured_levels",
    "model_summary",
    "model_vs_measurement",
]
