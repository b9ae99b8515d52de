"""Which metrics are trustworthy indicators of saturation (Alsayasneh, seed 000 §2.6-2.7).

The thesis classifies each metric's curve over a sweep by eye; this module writes the rule down.
For one setup, with levels n_1 < ... < n_K, the metric's mean x_k per level, the labels of the
saturation analysis, g the first gray level (or the first server level s if there is none):

1. ``unidentified`` when the first level is already ``server`` (no client or gray level) or
   the sweep has fewer than 4 levels (too few to tell a trend change).
2. Trend change: continuous piecewise-linear fits with 0..3 breakpoints at interior levels
   (exhaustive search, least squares); the number of breakpoints is chosen by BIC. The change is
   significant when the F test of that fit against the straight line has p < ``change_p`` and
   the fits differ somewhere by at least ``min_effect`` of the metric's range. Otherwise:
   ``not reliable`` (constant, linear, noise).
3. The shift zone is [n_{g-1}, n_{s+1}] (one level either side of the gray zone and the first
   server level). No breakpoint in it: ``misleading`` (a change, at the wrong load).
4. A breakpoint in the zone and one threshold separates all client values (gray values if there
   are no client levels) from all server values: ``reliable``. Otherwise ``partially reliable``
   (the trend tells, a single value does not).

Across setups: ``misleading`` if misleading in any setup (the thesis's rule: do not rely on it),
``unidentified`` if no setup is identifiable, else ``reliable`` if reliable in at least half of
the identifiable setups, ``partially reliable`` if reliable or partially reliable in at least
half, else ``not reliable``. Covering sets: the smallest sets of metrics such that every
identifiable setup has a reliable metric in the set (or as many setups as any set can cover),
for any metric, server-side metrics only (tier other than ``client``) and metrics never
misleading.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from tierscope.analysis._windows import in_steady_windows
from tierscope.spec.analysis import AnalysisOptions

__all__ = [
    "CATEGORIES",
    "PatternVerdict",
    "aggregate",
    "analyze_indicators",
    "classify_pattern",
    "covering_sets",
    "metric_levels",
    "segmented_fit",
]

R, PR, NR, M, U = "reliable", "partially reliable", "not reliable", "misleading", "unidentified"
CATEGORIES = (R, PR, NR, M, U)
MAX_BREAKS = 3
#: Largest number of metric combinations searched exhaustively for a covering set.
MAX_COMBINATIONS = 300_000


@dataclass(frozen=True)
class Fit:
    breaks: tuple[float, ...]
    rss: float
    fitted: np.ndarray


def _hinge_fit(x: np.ndarray, y: np.ndarray, breaks: Sequence[float]) -> Fit:
    cols = [np.ones_like(x), x] + [np.maximum(x - b, 0.0) for b in breaks]
    design = np.column_stack(cols)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ coef
    return Fit(tuple(float(b) for b in breaks), float(((y - fitted) ** 2).sum()), fitted)


def segmented_fit(x: Sequence[float], y: Sequence[float], breaks: int) -> Fit:
    """The least-squares continuous piecewise-linear fit with ``breaks`` breakpoints chosen
    among the interior x values (exhaustive search; exact for the short curves of a sweep)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if breaks == 0:
        return _hinge_fit(xa, ya, ())
    best: Fit | None = None
    for combo in itertools.combinations(xa[1:-1].tolist(), breaks):
        fit = _hinge_fit(xa, ya, combo)
        if best is None or fit.rss < best.rss - 1e-12 * (1 + best.rss):
            best = fit
    assert best is not None
    return best


@dataclass(frozen=True)
class PatternVerdict:
    category: str
    breaks: tuple[float, ...]
    p_value: float | None
    effect: float
    separable: bool
    evidence: str


def classify_pattern(
    levels: Sequence[float],
    values: Sequence[float],
    labels: Sequence[str],
    *,
    change_p: float = 0.01,
    min_effect: float = 0.1,
) -> PatternVerdict:
    """Category of one metric's curve over one setup's sweep (rule in the module docstring)."""
    n = np.asarray(levels, dtype=float)
    x = np.asarray(values, dtype=float)
    keep = np.isfinite(x)
    n, x = n[keep], x[keep]
    lab = [lab for lab, k in zip(labels, keep, strict=True) if k]
    if not lab or lab[0] == "server":
        return PatternVerdict(U, (), None, 0.0, False, "the server limits every level")
    K = x.size
    s = lab.index("server") if "server" in lab else K
    g = lab.index("gray") if "gray" in lab else s
    span = float(np.ptp(x))
    if K < 4:
        return PatternVerdict(U, (), None, 0.0, False, "too few levels to judge (fewer than 4)")
    if span <= 1e-12 * max(1.0, float(np.abs(x).max())):
        return PatternVerdict(NR, (), None, 0.0, False, "constant")
    line = _hinge_fit(n, x, ())
    floor = 1e-24 * K * (1.0 + float(np.mean(x * x)))
    best_k, best_fit, best_bic = 0, line, K * math.log(max(line.rss, floor) / K) + 2 * math.log(K)
    for k in range(1, MAX_BREAKS + 1):
        p_k = 2 + 2 * k  # intercept, slope, and per breakpoint a slope change and its place
        if K - p_k < 1:
            break
        fit = segmented_fit(n, x, k)
        bic = K * math.log(max(fit.rss, floor) / K) + p_k * math.log(K)
        if bic < best_bic - 1e-9:
            best_k, best_fit, best_bic = k, fit, bic
    effect = float(np.abs(best_fit.fitted - line.fitted).max()) / span if best_k else 0.0
    if best_k == 0:
        return PatternVerdict(NR, (), None, 0.0, False, "no trend change (a line fits best)")
    gain = line.rss - best_fit.rss
    dfn, dfd = 2 * best_k, K - (2 + 2 * best_k)
    if best_fit.rss <= floor:
        p = 0.0 if gain > floor else 1.0
    else:
        p = float(stats.f.sf((gain / dfn) / (best_fit.rss / dfd), dfn, dfd))
    where = ", ".join(f"{b:g}" for b in best_fit.breaks)
    if p >= change_p or effect < min_effect:
        return PatternVerdict(
            NR,
            best_fit.breaks,
            p,
            effect,
            False,
            f"no significant trend change (best breaks at {where}: p={p:.2g}, "
            f"effect {effect:.0%} of the range)",
        )
    lo = n[max(g - 1, 0)]
    hi = n[min(s + 1, K - 1)]
    in_zone = [b for b in best_fit.breaks if lo - 1e-9 <= b <= hi + 1e-9]
    before = x[:g] if g > 0 else x[:s]
    after = x[s:]
    separable = bool(
        before.size and after.size and (before.max() < after.min() or before.min() > after.max())
    )
    zone = f"shift zone [{lo:g}, {hi:g}]"
    if not in_zone:
        return PatternVerdict(
            M,
            best_fit.breaks,
            p,
            effect,
            separable,
            f"trend changes at {where}, outside the {zone} (p={p:.2g})",
        )
    if separable:
        return PatternVerdict(
            R,
            best_fit.breaks,
            p,
            effect,
            True,
            f"trend changes at {where} in the {zone} (p={p:.2g}) and one threshold separates "
            "client from server values",
        )
    return PatternVerdict(
        PR,
        best_fit.breaks,
        p,
        effect,
        False,
        f"trend changes at {where} in the {zone} (p={p:.2g}) but client and server values "
        "overlap: the trend tells, a single value does not",
    )


def aggregate(per_setup: Mapping[str, str]) -> str:
    """One category from the per-setup categories (rule in the module docstring)."""
    cats = list(per_setup.values())
    if M in cats:
        return M
    known = [c for c in cats if c != U]
    if not known:
        return U
    half = len(known) / 2
    if sum(c == R for c in known) >= half:
        return R
    if sum(c in (R, PR) for c in known) >= half:
        return PR
    return NR


def covering_sets(
    matrix: Mapping[str, Mapping[str, str]], tiers: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Smallest metric sets covering the identifiable setups with reliable metrics.

    ``matrix`` is {metric: {setup: category}}; ``tiers`` gives each metric's tier (``client``
    metrics are not server-side). Returns one entry per variant: any, server-side, never
    misleading.
    """
    setups = sorted({s for row in matrix.values() for s in row})
    identifiable = [s for s in setups if any(row.get(s, U) != U for row in matrix.values())]
    variants = {
        "any": lambda m: True,
        "server-side": lambda m: tiers.get(m) != "client",
        "never misleading": lambda m: M not in matrix[m].values(),
    }
    out = []
    for variant, allowed in variants.items():
        covers = {
            m: frozenset(s for s in identifiable if matrix[m].get(s) == R)
            for m in sorted(matrix)
            if allowed(m)
        }
        chosen = _smallest_cover({m: c for m, c in covers.items() if c})
        covered = sorted(set().union(*(covers[m] for m in chosen))) if chosen else []
        out.append(
            {
                "variant": variant,
                "metrics": chosen,
                "covered": covered,
                "uncovered": [s for s in identifiable if s not in covered],
            }
        )
    return out


def _smallest_cover(covers: dict[str, frozenset[str]]) -> list[str]:
    if not covers:
        return []
    # drop metrics whose setups another metric covers too (ties: keep the first name)
    names = sorted(covers)
    kept = [
        m
        for m in names
        if not any(
            covers[m] < covers[o] or (covers[m] == covers[o] and o < m) for o in names if o != m
        )
    ]
    target = frozenset().union(*covers.values())
    for size in range(1, len(kept) + 1):
        if math.comb(len(kept), size) > MAX_COMBINATIONS:
            break
        for combo in itertools.combinations(kept, size):
            if frozenset().union(*(covers[m] for m in combo)) == target:
                return list(combo)
    chosen: list[str] = []  # greedy when the exhaustive search would be too large
    left = set(target)
    while left:
        m = max(kept, key=lambda m: (len(covers[m] & left), -kept.index(m)))
        chosen.append(m)
        left -= covers[m]
    return chosen


def metric_levels(
    metrics: pl.DataFrame | None, points: pl.DataFrame, windows: pl.DataFrame
) -> pl.DataFrame:
    """Mean of every ``tier.metric`` per (setup, level): steady-window means averaged over reps.

    From ``metrics.parquet`` (samples in each steady window, all nodes of a tier) and from the
    ``tier.metric`` columns of ``points.parquet`` (imported points), the former winning.
    """
    frames = []
    if metrics is not None and metrics.height and windows.height:
        samples = (
            metrics.lazy()
            .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
            .select("t", "tier", "metric", "value")
        )
        per_rep = (
            in_steady_windows(samples, windows)
            .group_by("_setup", "_level", "_rep", "tier", "metric")
            .agg(pl.col("value").mean())
            .group_by("_setup", "_level", "tier", "metric")
            .agg(pl.col("value").mean())
            .select(
                pl.col("_setup").alias("setup"),
                pl.col("_level").alias("level"),
                pl.concat_str("tier", pl.lit("."), "metric").alias("name"),
                pl.col("tier"),
                pl.col("value"),
            )
            .collect()
        )
        frames.append(per_rep)
    extra = [c for c in points.columns if "." in c]
    if extra:
        long = (
            points.select("setup", pl.col("level").cast(pl.Float64), *extra)
            .unpivot(index=["setup", "level"], variable_name="name", value_name="value")
            .with_columns(pl.col("value").cast(pl.Float64))
            .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
            .group_by("setup", "level", "name")
            .agg(pl.col("value").mean())
            .with_columns(pl.col("name").str.split(".").list.first().alias("tier"))
            .select("setup", "level", "name", "tier", "value")
        )
        if frames:
            have = frames[0].select("setup", "level", "name")
            long = long.join(have, on=["setup", "level", "name"], how="anti")
        frames.append(long)
    if not frames:
        return pl.DataFrame(
            schema={
                "setup": pl.String,
                "level": pl.Float64,
                "name": pl.String,
                "tier": pl.String,
                "value": pl.Float64,
            }
        )
    return pl.concat(frames).sort("name", "setup", "level")


def analyze_indicators(
    levels: pl.DataFrame,
    saturation: Sequence[Mapping[str, Any]],
    options: AnalysisOptions,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(indicators, covering sets) from :func:`metric_levels` and the saturation entries."""
    labels = {s["setup"]: {c["level"]: c["label"] for c in s["curve"]} for s in saturation}
    matrix: dict[str, dict[str, str]] = {}
    why: dict[str, dict[str, str]] = {}
    tiers: dict[str, str] = {}
    for (name, setup), frame in levels.group_by("name", "setup", maintain_order=True):
        if setup not in labels:
            continue
        frame = frame.sort("level")
        lv = frame["level"].to_list()
        lab = [labels[setup].get(v) for v in lv]
        if any(v is None for v in lab):
            keep = [i for i, v in enumerate(lab) if v is not None]
            lv = [lv[i] for i in keep]
            lab = [lab[i] for i in keep]
            vals = [frame["value"][i] for i in keep]
        else:
            vals = frame["value"].to_list()
        verdict = classify_pattern(
            lv, vals, lab, change_p=options.change_p, min_effect=options.min_effect
        )
        matrix.setdefault(str(name), {})[str(setup)] = verdict.category
        why.setdefault(str(name), {})[str(setup)] = verdict.evidence
        tiers[str(name)] = str(frame["tier"][0])
    indicators = []
    for name in sorted(matrix):
        per = matrix[name]
        counts = {c: sum(v == c for v in per.values()) for c in CATEGORIES if c in per.values()}
        evidence = "; ".join(f"{s}: {per[s]} ({why[name][s]})" for s in sorted(per))
        indicators.append(
            {
                "metric": name,
                "tier": tiers[name],
                "category": aggregate(per),
                "per_setup": dict(sorted(per.items())),
                "counts": counts,
                "evidence": evidence,
            }
        )
    order = {c: i for i, c in enumerate(CATEGORIES)}
    indicators.sort(key=lambda d: (order[d["category"]], d["metric"]))
    return indicators, covering_sets(matrix, tiers)
