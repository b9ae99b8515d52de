"""Suspects: for incident data (no load levels), every component ranked by how strongly and how
early its resources depart from normal behaviour, with the evidence in words.

Method, one for every case:

* **Normal.** Each series' normal behaviour comes from the ``baseline`` setup (the same system
  recorded in normal operation, ``import metrics --baseline``), else from the first
  :data:`NORMAL_FRACTION` of the data, said in the notes.
* **Departure.** A sample's departure is how far it lies above the normal median, in units of
  the normal spread: z = (x - median) / scale, with scale = max(1.4826 MAD, 1 % of the median,
  the metric's resolution floor (:data:`FLOORS`)): a series that never moved in normal
  operation is judged against its own magnitude, not against zero. A series' score is the 90th
  percentile of z over the incident (a departure must last, a spike does not make one); its
  onset is the first time z stays above :data:`Z_ONSET` for :data:`ONSET_SAMPLES` samples, in
  seconds from the start of the incident data.
* **Resource.** A component's resources (cpu, memory, disk, network, queue) score as their best
  metric, and the one that departed most (in normal spreads) is named; the others that departed
  (score >= :data:`Z_SIGNIFICANT`) are in the evidence. A memory hog burns CPU too, a CPU hog
  takes a little memory: the larger departure tells them apart.
* **Cause or victim.** With a call graph (recorded, or given; never one guessed from names), a
  component whose callee departed as early or earlier is explained by it: it is ranked after
  the unexplained ones and its evidence names the callee.

Components are ranked by (explained, -score, onset); those with no departure come last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tierscope.spec.graph import Graph

#: The share of the data taken as normal when the run has no baseline setup.
NORMAL_FRACTION = 0.2
BASELINE = "baseline"
#: A series departs when its score reaches this; its onset is when z stays above Z_ONSET.
Z_SIGNIFICANT, Z_ONSET, ONSET_SAMPLES = 6.0, 3.0, 3
#: The quantile of z over the incident that scores a series.
SCORE_QUANTILE = 0.9
#: metric -> resource; the resources a component's departure can be in.
RESOURCE_OF: dict[str, str] = {
    "cpu_util": "cpu",
    "cpu_cores": "cpu",
    "cpu_throttled_ratio": "cpu",
    "utilization": "cpu",
    "mem_bytes": "memory",
    "mem_util": "memory",
    "major_faults_s": "memory",
    "psi_memory_some": "memory",
    "disk_util": "disk",
    "psi_io_some": "disk",
    "net_rx_bytes_s": "network",
    "net_tx_bytes_s": "network",
    "disk_read_bytes_s": "disk",
    "disk_write_bytes_s": "disk",
    "cpu_iowait": "disk",
    "run_queue": "cpu",
    "queue_length": "queue",
}
#: metric -> symptom: what ranks components when the data has no resource metric at all
#: (latency, availability and error exports such as CloudWatch's); availability departs down.
SYMPTOM_OF: dict[str, str] = {
    "rt_mean": "latency",
    "rt_p50": "latency",
    "rt_p90": "latency",
    "rt_p95": "latency",
    "rt_p99": "latency",
    "exclusive_mean": "latency",  # a component's own time (traces): its callees' left out
    "availability": "errors",
    "errors_s": "errors",
}
#: Fractions of success: judged by their complement (the share of failures, normally near 0,
#: so that one failed request in a hundred is far from normal).
DOWNWARD = frozenset({"availability"})
#: Which resource is named when two departed exactly as far (the first can cause the later).
CAUSE_ORDER = ("memory", "disk", "network", "cpu", "queue")
_CAUSE_RANK = {r: i for i, r in enumerate(CAUSE_ORDER)}
#: The smallest spread a metric's normal behaviour is given (its measurement resolution).
FLOORS: dict[str, float] = {
    "cpu_cores": 0.01,
    "cpu_util": 0.01,
    "cpu_throttled_ratio": 0.01,
    "utilization": 0.01,
    "mem_bytes": 2.0**20,
    "mem_util": 0.001,
    "disk_util": 0.01,
    "rt_mean": 0.001,
    "rt_p50": 0.001,
    "rt_p90": 0.001,
    "rt_p95": 0.001,
    "rt_p99": 0.001,
    "exclusive_mean": 0.001,
    "availability": 0.001,
}
#: Metrics whose nodes' values add up to the component's (the others are averaged).
ADDITIVE = frozenset({"cpu_cores", "mem_bytes", "major_faults_s", "net_rx_bytes_s",
                      "net_tx_bytes_s", "disk_read_bytes_s", "disk_write_bytes_s", "run_queue",
                      "queue_length", "errors_s"})  # fmt: skip
#: Normal behaviour needs at least this many samples of a series.
MIN_NORMAL = 2


@dataclass(frozen=True)
class Departure:
    tier: str
    metric: str
    resource: str
    score: float
    onset: float | None
    normal: float
    typical: float  # the median during the incident


def _departure(
    tier: str, metric: str, normal: np.ndarray, t: np.ndarray, x: np.ndarray
) -> Departure | None:
    if normal.size < MIN_NORMAL or x.size < 1:
        return None
    if metric in DOWNWARD:  # availability: its complement, the share of failures, departs up
        normal, x = 1.0 - normal, 1.0 - x
    med = float(np.median(normal))
    mad = 1.4826 * float(np.median(np.abs(normal - med)))
    scale = max(mad, 0.01 * abs(med), FLOORS.get(metric, 0.0), 1e-12)
    z = (x - med) / scale
    score = float(np.quantile(z, SCORE_QUANTILE))
    above = z > Z_ONSET
    need = min(ONSET_SAMPLES, x.size)
    run = np.convolve(above.astype(int), np.ones(need, dtype=int), mode="valid")
    starts = np.flatnonzero(run == need)
    onset = float(t[starts[0]]) if starts.size else None
    kind = RESOURCE_OF.get(metric) or SYMPTOM_OF[metric]
    typical = float(np.median(x))
    if metric in DOWNWARD:
        med, typical = 1.0 - med, 1.0 - typical
    return Departure(tier, metric, kind, score, onset, med, typical)


def departures(
    metrics: pl.DataFrame, normal_until: float | None = None
) -> tuple[list[Departure], str]:
    """Every (component, resource metric) series' departure, and where normal came from;
    symptoms (latency, availability, errors) stand in when the data has no resource metric.
    ``normal_until``: the data before this time is normal (else a baseline setup, else the
    first :data:`NORMAL_FRACTION`)."""
    m = metrics.filter(pl.col("value").is_finite() & ~pl.col("tier").is_in(["client", "host"]))
    scored = RESOURCE_OF if m["metric"].is_in(list(RESOURCE_OF)).any() else SYMPTOM_OF
    m = m.filter(pl.col("metric").is_in(list(scored)))
    setups = set(m["setup"].unique().to_list()) if "setup" in m.columns else set()
    if normal_until is not None:
        normal_rows = m.filter(pl.col("t") < normal_until)
        incident = m.filter(pl.col("t") >= normal_until)
        said = f"normal behaviour before {normal_until:g} s (normal_until_s)"
    elif BASELINE in setups:
        normal_rows = m.filter(pl.col("setup") == BASELINE)
        incident = m.filter(pl.col("setup") != BASELINE)
        said = f"normal behaviour from the '{BASELINE}' recording"
    else:
        t0, t1 = float(m["t"].min() or 0.0), float(m["t"].max() or 0.0)
        cut = t0 + NORMAL_FRACTION * (t1 - t0)
        normal_rows, incident = m.filter(pl.col("t") < cut), m.filter(pl.col("t") >= cut)
        said = (
            f"normal behaviour from the first {NORMAL_FRACTION:.0%} of the data "
            f"({t0:g}-{cut:g} s; no baseline recording)"
        )

    def series(frame: pl.DataFrame) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
        """One value per time per series: a component's nodes add up where the metric is an
        amount (cores, bytes, rates, queues) and average where it is a share or a latency."""
        out = {}
        for (tier, metric), g in frame.group_by("tier", "metric"):
            how = "sum" if metric in ADDITIVE else "mean"
            per_t = g.group_by("t").agg(getattr(pl.col("value"), how)()).sort("t")
            out[(str(tier), str(metric))] = (per_t["t"].to_numpy(), per_t["value"].to_numpy())
        return out

    normal, now = series(normal_rows), series(incident)
    start = float(incident["t"].min() or 0.0)
    found = []
    for key, (t, x) in now.items():
        t = t - start  # onsets count from the start of the incident data
        if key in normal:
            d = _departure(key[0], key[1], normal[key][1], t, x)
            if d is not None:
                found.append(d)
    return found, said


def rank_suspects(
    metrics: pl.DataFrame, graph: Graph | None, normal_until: float | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The suspects document (best first) and where normal behaviour came from; ``graph``: a
    call graph to tell causes from victims (None: the data has none)."""
    found, said = departures(metrics, normal_until)
    symptoms = bool(found) and found[0].resource in SYMPTOM_OF.values()
    if symptoms:
        said += "; no resource metric: ranked by symptoms (latency, availability, errors)"
    by_tier: dict[str, list[Departure]] = {}
    for d in found:
        by_tier.setdefault(d.tier, []).append(d)
    chosen: dict[str, tuple[Departure, list[Departure]]] = {}
    for tier, ds in by_tier.items():
        best: dict[str, Departure] = {}
        for d in ds:
            if d.resource not in best or d.score > best[d.resource].score:
                best[d.resource] = d
        ranked = sorted(
            best.values(), key=lambda d: (-d.score, _CAUSE_RANK.get(d.resource, len(_CAUSE_RANK)))
        )
        chosen[tier] = (ranked[0], [d for d in ranked if d.score >= Z_SIGNIFICANT])
    explained: dict[str, str] = {}
    if graph is not None:
        for tier, (lead, departed) in chosen.items():
            if not departed or tier not in graph:
                continue
            # of the callees (direct or further down) that departed as early: the earliest,
            # then the deepest (the end of the chain, its cause), then by name
            early = [
                c for c in graph.downstream(tier)
                if c in chosen and chosen[c][1] and _earlier(chosen[c][0].onset, lead.onset)
            ]  # fmt: skip
            if early:
                explained[tier] = min(
                    early,
                    key=lambda c: (_onset(chosen[c][0]), -graph.depth(c), c),
                )
    reach = _symptom_paths(chosen, graph) if symptoms else None
    order = sorted(
        chosen,
        key=lambda c: (
            not chosen[c][1],
            reach is not None and c not in reach,
            c in explained,
            -chosen[c][0].score,
            math.inf if chosen[c][0].onset is None else chosen[c][0].onset,
            c,
        ),
    )
    out = []
    for tier in order:
        lead, departed = chosen[tier]
        out.append(
            {
                "tier": tier,
                "resource": lead.resource,
                "metric": lead.metric,
                "score": round(lead.score, 2),
                "onset": lead.onset,
                "evidence": _evidence(lead, departed, explained.get(tier)),
            }
        )
    return out, said


def _symptom_paths(
    chosen: dict[str, tuple[Departure, list[Departure]]], graph: Graph | None
) -> set[str] | None:
    """Symptoms travel from a callee to its callers: the departed components joined to a
    departed front component (one nobody calls) by a chain of departed callers. None without a
    graph or a departed front."""
    if graph is None:
        return None
    departed = {c for c, (_, d) in chosen.items() if d and c in graph}
    fronts = [c for c in departed if not graph.callers(c)]
    if not fronts:
        return None
    reach, todo = set(fronts), list(fronts)
    while todo:
        for call in graph[todo.pop()].calls:
            if call.to in departed and call.to not in reach:
                reach.add(call.to)
                todo.append(call.to)
    return reach


def _onset(d: Departure) -> float:
    return math.inf if d.onset is None else d.onset


def _earlier(a: float | None, b: float | None) -> bool:
    return a is not None and (b is None or a <= b)


def _show(metric: str, v: float) -> str:
    if metric == "mem_bytes":
        return f"{v / 2**20:,.0f} MiB"
    if metric == "cpu_cores":
        return f"{v:.2f} cores"
    if metric.endswith("_util") or metric in ("cpu_throttled_ratio", "utilization"):
        return f"{v:.0%}"
    return f"{v:.3g}"


def _evidence(lead: Departure, departed: list[Departure], callee: str | None) -> str:
    if not departed:
        return f"no departure from normal (largest: {lead.metric}, {lead.score:.1f} spreads)"
    text = (
        f"{lead.metric} {_show(lead.metric, lead.typical)} against "
        f"{_show(lead.metric, lead.normal)} normally ({lead.score:.0f} normal spreads)"
    )
    if lead.onset is not None:
        text += f", from {lead.onset:.0f} s into the data"
    others = [d for d in departed if d is not lead]
    if others:
        text += "; also " + ", ".join(f"{d.resource} ({d.score:.0f})" for d in others)
    if callee is not None:
        text += f"; explained by {callee}, which it calls and which departed as early"
    return text


__all__ = ["Departure", "departures", "rank_suspects"]
