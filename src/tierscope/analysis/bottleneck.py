"""Bottleneck tier and resource per load level: single, concurrent, oscillatory or the client.

Method (Malkowski, seed 001 §2.2, with the independence baseline the thesis lacks):

1. Each resource of each node (``resources.SIGNALS``) gets, per window of ``window_s`` seconds
   of every steady window, the mean of each of its metrics divided by its threshold; the
   resource is critically saturated in the window when the largest ratio is >= 1.
2. Over a level's windows (repetitions concatenated), f = fraction of saturated windows. A
   resource with f > ``partial_min`` is a bottleneck resource; ``full`` when f >= ``full_min``,
   ``partial`` otherwise.
3. Two bottleneck resources are compared with the overlap they would have if independent
   (lift = P(both) / (P(a) P(b)), phi coefficient) and a permutation test that shifts one
   series circularly against the other (which keeps each series' own autocorrelation):
   ``alternating`` when they overlap significantly less than by chance (the mutual exclusion
   Malkowski calls dependent), ``together`` when significantly more, else ``independent``.
4. Kind: ``client`` when the load generator (tier ``client``) is a bottleneck resource at least
   as often saturated as any server resource; ``none`` without server bottleneck resources;
   ``single`` with one; with several, the groups of partial resources linked by alternation are
   oscillatory bottlenecks, every other resource its own bottleneck, the primary bottleneck is
   the one with the largest f_B (fraction of windows with any of its resources saturated), and
   the kind is ``oscillatory`` if the primary is such a group and ``concurrent`` otherwise
   (``pattern`` keeps Malkowski's finer "simultaneous" when all are fully saturated).

Push-back (soft resources): worker pools and connection pools fill up *because* a hardware
resource further down the chain is saturated — the app's threads all wait on the saturated
database, its connection pool is all checked out. Such a soft resource is reported with role
``push-back`` and does not count as a bottleneck of its own when a hardware resource (cpu, disk)
of its own tier or of a tier downstream of it (its callees, theirs and so on in the run's call
graph, :attr:`tierscope.store.Run.graph`; web → app → db in the three-tier shorthand) is
saturated at the same level;
without a saturated hardware resource, a full pool is the bottleneck (a soft-resource bottleneck,
e.g. a pool sized too small).

Queues that keep growing through a steady window (``queue_length``; see :func:`queue_growth`)
are listed with each level as evidence of an unstable tier. Host-level resources (tier
``host``: pressure) are reported but do not make a level concurrent: they describe the
machine, not a tier.

Each level's ``resources`` list is ordered by role, so that a reader taking the first entry
takes the bottleneck: the primary first, then the other bottlenecks, the load generator's
resources (role ``client``), push-back, and the host's (role ``host``); by saturated fraction
within a role.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from tierscope.analysis._windows import in_steady_windows
from tierscope.analysis.resources import resource_samples
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.graph import Graph

__all__ = ["analyze_bottlenecks", "dependence", "queue_growth", "window_states"]

#: A queue grows when its mean over the last quarter of a steady window exceeds the first
#: quarter's by at least this many requests and this fraction.
GROWTH_MIN_REQUESTS = 5.0
GROWTH_MIN_FRACTION = 0.5

CLIENT = "client"
HOST = "host"
#: Order of ``resources`` in a level's entry: bottlenecks (the primary first), the load
#: generator's resources, push-back (soft resources full because of a bottleneck), the host's.
ROLE_ORDER = {"bottleneck": 0, "client": 1, "push-back": 2, "host": 3}


def _role(tier: str, pushed: bool) -> str:
    if tier == CLIENT:
        return "client"
    if tier == HOST:
        return "host"
    return "push-back" if pushed else "bottleneck"


HARDWARE = ("cpu", "disk")
SOFT = ("workers", "pool")


def window_states(
    metrics: pl.DataFrame | pl.LazyFrame, windows: pl.DataFrame, options: AnalysisOptions
) -> pl.DataFrame:
    """Per (setup, level, rep, window k, tier, node, resource): ``score`` and ``value``, and
    ``part``: what of the resource scored highest (the callee of ``pool_util:<callee>``; null
    for a whole-resource metric).

    ``windows`` has one row per steady window (setup, level, rep, t_start, t_end); metrics are
    assigned to them by time. Only whole windows of ``window_s`` count (a steady window shorter
    than one gives one window).
    """
    lam = options.window_s
    whole = (pl.col("t_end") - pl.col("t_start")) / lam
    per_metric = (
        in_steady_windows(resource_samples(metrics, options), windows)
        .with_columns(
            ((pl.col("t") - pl.col("t_start")) / lam).floor().cast(pl.Int64).alias("k"),
            pl.max_horizontal(whole.floor(), pl.lit(1.0)).cast(pl.Int64).alias("_n"),
        )
        .filter(pl.col("k") < pl.col("_n"))
        .group_by("_setup", "_level", "_rep", "k", "tier", "node", "resource", "metric")
        .agg(pl.col("value").mean(), pl.col("score").mean())
    )
    # on a tie (a component's pool_util is its fullest pool_util:<callee>) the part is named
    return (
        per_metric.sort("score", "metric", descending=True)
        .group_by("_setup", "_level", "_rep", "k", "tier", "node", "resource")
        .agg(
            pl.col("score").first(),
            pl.col("value").first(),
            pl.col("metric").first().str.extract(":(.*)$").alias("part"),
        )
        .rename({"_setup": "setup", "_level": "level", "_rep": "rep"})
        .sort("setup", "level", "rep", "k", "tier", "node", "resource")
        .collect()
    )


def queue_growth(
    metrics: pl.DataFrame | pl.LazyFrame, windows: pl.DataFrame
) -> dict[tuple[str, float | None], list[dict[str, Any]]]:
    """Tiers whose ``queue_length`` keeps growing through a steady window (arrivals exceed
    what the tier serves: an open system past its capacity), per (setup, level).

    A tier's queue (summed over its nodes) grows when its mean over the last quarter of the
    window is at least GROWTH_MIN_REQUESTS and GROWTH_MIN_FRACTION above the first quarter's
    (repetitions averaged).
    """
    quarter = (pl.col("t") - pl.col("t_start")) / (pl.col("t_end") - pl.col("t_start")) * 4
    queues = (
        metrics.lazy()
        .filter((pl.col("metric") == "queue_length") & pl.col("value").is_not_nan())
        .group_by("t", "tier")
        .agg(pl.col("value").sum())
    )
    per_rep = (
        in_steady_windows(queues, windows)
        .with_columns(quarter.floor().cast(pl.Int64).alias("q"))
        .filter(pl.col("q").is_in([0, 3]))
        .group_by("_setup", "_level", "_rep", "tier")
        .agg(
            pl.col("value").filter(pl.col("q") == 0).mean().alias("first"),
            pl.col("value").filter(pl.col("q") == 3).mean().alias("last"),
            ((pl.col("t_end") - pl.col("t_start")).first() * 0.75).alias("span"),
        )
        .group_by("_setup", "_level", "tier")
        .agg(pl.col("first").mean(), pl.col("last").mean(), pl.col("span").mean())
        .sort("_setup", "_level", "tier")
        .collect()
    )
    out: dict[tuple[str, float | None], list[dict[str, Any]]] = {}
    for setup, level, tier, first, last, span in per_rep.iter_rows():
        if first is None or last is None:
            continue
        growth = last - first
        if growth >= GROWTH_MIN_REQUESTS and growth >= GROWTH_MIN_FRACTION * first:
            key = (str(setup), None if level is None else float(level))
            out.setdefault(key, []).append(
                {
                    "tier": str(tier),
                    "first": float(first),
                    "last": float(last),
                    "per_s": float(growth / span) if span else None,
                }
            )
    return out


def dependence(
    a: np.ndarray, b: np.ndarray, *, permutations: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Overlap of two binary saturation series against independence (lift, phi, permutation).

    The null distribution shifts ``b`` circularly by every offset 1..T-1 (all of them when
    there are at most ``permutations``, else a random sample); p-values count the observed
    arrangement as one of the permutations.
    """
    a = a.astype(bool)
    b = b.astype(bool)
    T = a.size
    pa, pb = a.mean(), b.mean()
    overlap = float((a & b).mean())
    expected = float(pa * pb)
    lift = overlap / expected if expected > 0 else None
    denom = math.sqrt(pa * (1 - pa) * pb * (1 - pb))
    phi = (overlap - expected) / denom if denom > 0 else None
    offsets = np.arange(1, T)
    if offsets.size > permutations:
        offsets = rng.choice(offsets, size=permutations, replace=False)
    if offsets.size:
        idx = (np.arange(T)[None, :] - offsets[:, None]) % T
        shifted = (a[None, :] & b[idx]).mean(axis=1)
        n = offsets.size
        p_alt = (1 + int((shifted <= overlap + 1e-12).sum())) / (n + 1)
        p_tog = (1 + int((shifted >= overlap - 1e-12).sum())) / (n + 1)
    else:
        p_alt = p_tog = 1.0
    return {
        "overlap": overlap,
        "expected": expected,
        "lift": lift,
        "phi": phi,
        "p_alternating": float(p_alt),
        "p_together": float(p_tog),
    }


def _relation(dep: dict[str, Any], alpha: float) -> str:
    lift = dep["lift"]
    if lift is not None and lift < 1 and dep["p_alternating"] < alpha:
        return "alternating"
    if lift is not None and lift > 1 and dep["p_together"] < alpha:
        return "together"
    return "independent"


def _pushed_back(
    server: list[int],
    resources: list[tuple[str, str, str]],
    parts: list[set[str]],
    graph: Graph | None,
) -> set[int]:
    """Soft resources saturated while a hardware resource of their tier or of a tier downstream
    is saturated too (see the module docstring); none without a call graph. A component's pool
    to a callee (``parts``: the callees of the pools found full) is pushed back only from that
    callee or below it: a full pool to one callee is not explained by another's saturation."""
    if graph is None:
        return set()
    hard = {resources[j][0] for j in server if resources[j][2] in HARDWARE}

    def behind(i: int) -> set[str]:
        tier = resources[i][0]
        callees = [c for c in parts[i] if c in graph]
        if resources[i][2] == "pool" and callees:
            return set().union(*({c} | graph.downstream(c) for c in callees))
        return {tier} | graph.downstream(tier)

    return {
        i
        for i in server
        if resources[i][2] in SOFT and resources[i][0] in graph and hard & behind(i)
    }


def _to(parts: set[str]) -> str:
    return f" (to {', '.join(sorted(parts))})" if parts else ""


def _components(nodes: list[int], edges: list[tuple[int, int]]) -> list[list[int]]:
    parent = {n: n for n in nodes}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in edges:
        parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for n in nodes:
        groups.setdefault(find(n), []).append(n)
    return [sorted(g) for g in groups.values()]


def analyze_bottlenecks(
    states: pl.DataFrame,
    options: AnalysisOptions,
    *,
    labels: dict[tuple[str, float | None], str] | None = None,
    levels: list[tuple[str, float | None]] | None = None,
    growing: dict[tuple[str, float | None], list[dict[str, Any]]] | None = None,
    graph: Graph | None = None,
) -> list[dict[str, Any]]:
    """One entry per (setup, level) of ``states`` (from :func:`window_states`).

    ``labels`` gives the client/gray/server label of each (setup, level); ``levels`` lists
    levels to report even without resource metrics (as kind ``none``); ``growing`` the
    growing queues of :func:`queue_growth`, added to each level's entry and evidence;
    ``graph`` the run's call graph, which push-back follows (without one: no push-back).
    """
    rng = np.random.default_rng(options.seed)
    out: list[dict[str, Any]] = []
    keys: list[tuple[str, float | None]] = list(levels or [])
    groups: dict[tuple[str, float | None], pl.DataFrame] = {}
    if states.height:
        for (setup, level), frame in states.group_by("setup", "level", maintain_order=True):
            key = (str(setup), None if level is None else float(level))
            groups[key] = frame
            if key not in keys:
                keys.append(key)
    keys.sort(key=lambda k: (k[0], -math.inf if k[1] is None else k[1]))
    for key in keys:
        frame = groups.get(key)
        label = (labels or {}).get(key)
        if frame is None:
            entry = _empty(key, label, "no resource metrics in the steady windows")
        else:
            entry = _classify(key, frame, options, rng, label, graph)
        queues = (growing or {}).get(key, [])
        entry["growing_queues"] = queues
        if queues:
            entry["evidence"] += (
                "; growing queues: "
                + ", ".join(f"{q['tier']} from {q['first']:.3g} to {q['last']:.3g}" for q in queues)
                + " (arrivals exceed what the tier serves)"
            )
        out.append(entry)
    return out


def _empty(key: tuple[str, float | None], label: str | None, why: str) -> dict[str, Any]:
    return {
        "setup": key[0],
        "level": key[1],
        "kind": "none",
        "pattern": "none",
        "primary": None,
        "primary_fraction": None,
        "label": label,
        "windows": 0,
        "resources": [],
        "pairs": [],
        "evidence": why,
    }


def _classify(
    key: tuple[str, float | None],
    frame: pl.DataFrame,
    options: AnalysisOptions,
    rng: np.random.Generator,
    label: str | None,
    graph: Graph | None,
) -> dict[str, Any]:
    # one column per window (rep, k), one row per resource; a missing sample is "not saturated"
    frame = frame.with_columns((pl.col("score") >= 1.0 - 1e-12).alias("sat"))
    windows = frame.select("rep", "k").unique().sort("rep", "k")
    T = windows.height
    win_index = {(r, k): i for i, (r, k) in enumerate(windows.iter_rows())}
    res_keys = frame.select("tier", "node", "resource").unique().sort("tier", "node", "resource")
    resources = [tuple(r) for r in res_keys.iter_rows()]
    res_index = {r: i for i, r in enumerate(resources)}
    B = np.zeros((len(resources), T), dtype=bool)
    values: list[list[float]] = [[] for _ in resources]
    parts: list[set[str]] = [set() for _ in resources]  # e.g. the callees of full pools
    if "part" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.String).alias("part"))
    for tier, node, res, rep, k, sat, value, part in frame.select(
        "tier", "node", "resource", "rep", "k", "sat", "value", "part"
    ).iter_rows():
        i = res_index[(tier, node, res)]
        B[i, win_index[(rep, k)]] = bool(sat)
        values[i].append(float(value))
        if sat and part is not None:
            parts[i].add(part)
    f = B.mean(axis=1)

    bottleneck = [i for i in range(len(resources)) if f[i] > options.partial_min]
    server = [i for i in bottleneck if resources[i][0] not in (CLIENT, HOST)]
    pushed = _pushed_back(server, resources, parts, graph)
    server = [i for i in server if i not in pushed]

    def resource_doc(i: int) -> dict[str, Any]:
        tier, node, res = resources[i]
        doc = {
            "tier": tier,
            "node": node,
            "resource": res,
            "saturation_fraction": float(f[i]),
            "state": "full" if f[i] >= options.full_min else "partial",
            "role": _role(tier, i in pushed),
            "mean_utilization": float(np.mean(values[i])) if values[i] else None,
        }
        if parts[i]:
            doc["parts"] = sorted(parts[i])
        return doc

    client = [i for i in bottleneck if resources[i][0] == CLIENT]
    host = [i for i in bottleneck if resources[i][0] == HOST]
    name = {i: "/".join(resources[i]) for i in range(len(resources))}

    pairs: list[dict[str, Any]] = []
    relations: dict[tuple[int, int], str] = {}
    for x, i in enumerate(server):
        for j in server[x + 1 :]:
            dep = dependence(B[i], B[j], permutations=options.permutations, rng=rng)
            rel = _relation(dep, options.dependence_alpha)
            relations[(i, j)] = rel
            pairs.append({"a": name[i], "b": name[j], **dep, "relation": rel})

    top_server = max((f[i] for i in server), default=0.0)

    def base(primary: int | None) -> dict[str, Any]:
        # readers take the first entry: the primary, the other bottlenecks, then the resources
        # that are full only because of them (push-back), then the host's
        def order(i: int) -> tuple[int, int, float, tuple[str, str, str]]:
            rank = ROLE_ORDER[_role(resources[i][0], i in pushed)]
            return (i != primary, rank, -f[i], resources[i])

        return {
            "setup": key[0],
            "level": key[1],
            "label": label,
            "windows": T,
            "resources": [resource_doc(i) for i in sorted(bottleneck, key=order)],
            "pairs": pairs,
        }

    host_note = ""
    if pushed:
        host_note += "; push-back (full because a hardware resource downstream is): " + ", ".join(
            f"{name[i]}{_to(parts[i])} {f[i]:.0%}" for i in sorted(pushed)
        )
    if host:
        host_note += "; host " + ", ".join(f"{name[i]} {f[i]:.0%}" for i in host)
    if client and max(f[i] for i in client) >= top_server:
        top = max(client, key=lambda i: f[i])
        return base(top) | {
            "kind": "client",
            "pattern": "client",
            "primary": resource_doc(top),
            "primary_fraction": float(f[top]),
            "evidence": (
                f"the load generator ({name[top]}) is saturated in {f[top]:.0%} of "
                f"{T} windows of {options.window_s:g} s, at least as often as any server "
                f"resource ({top_server:.0%}): the client limited throughput{host_note}"
            ),
        }
    if not server:
        quiet = max(range(len(resources)), key=lambda i: f[i], default=None)
        most = "" if quiet is None else f"; most saturated: {name[quiet]} {f[quiet]:.0%}"
        return base(None) | {
            "kind": "none",
            "pattern": "none",
            "primary": None,
            "primary_fraction": None,
            "evidence": (
                f"no server resource saturated (>= {options.saturation_threshold:g} of capacity)"
                f" in more than {options.partial_min:.0%} of {T} windows{most}{host_note}"
            ),
        }
    if len(server) == 1:
        i = server[0]
        return base(i) | {
            "kind": "single",
            "pattern": "single",
            "primary": resource_doc(i),
            "primary_fraction": float(f[i]),
            "evidence": (
                f"{name[i]} is saturated in {f[i]:.0%} of {T} windows of {options.window_s:g} s;"
                f" no other server resource is saturated in more than {options.partial_min:.0%}"
                f"{host_note}"
            ),
        }

    partial = [i for i in server if f[i] < options.full_min]
    edges = [
        (i, j)
        for (i, j), rel in relations.items()
        if rel == "alternating" and i in partial and j in partial
    ]
    groups = _components(server, edges)
    units = []
    for g in groups:
        fb = float(B[g].any(axis=0).mean())
        units.append((fb, g))
    units.sort(key=lambda u: (-u[0], [resources[i] for i in u[1]]))
    fb, primary_group = units[0]
    lead = max(primary_group, key=lambda i: f[i])
    oscillating = [g for g in groups if len(g) > 1]
    if len(primary_group) > 1:
        kind, pattern = "oscillatory", "oscillatory"
    else:
        kind = "concurrent"
        pattern = "simultaneous" if all(f[i] >= options.full_min for i in server) else "concurrent"
    described = ", ".join(f"{name[i]} {f[i]:.0%}" for i in sorted(server, key=lambda i: -f[i]))
    rels = "; ".join(
        f"{p['a']} & {p['b']}: {p['relation']} (overlap {p['overlap']:.0%} vs "
        f"{p['expected']:.0%} if independent, p={min(p['p_alternating'], p['p_together']):.2g})"
        for p in pairs
    )
    osc = ""
    if oscillating:
        osc = "; oscillating groups: " + ", ".join(
            "{" + ", ".join(name[i] for i in g) + "}" for g in oscillating
        )
    return base(lead) | {
        "kind": kind,
        "pattern": pattern,
        "primary": resource_doc(lead),
        "primary_fraction": fb,
        "evidence": (
            f"{len(server)} server resources saturated in windows of {options.window_s:g} s: "
            f"{described}; {rels}{osc}; primary: "
            + (
                "{" + ", ".join(name[i] for i in primary_group) + "}"
                if len(primary_group) > 1
                else name[lead]
            )
            + f" (saturated in {fb:.0%} of windows){host_note}"
        ),
    }
