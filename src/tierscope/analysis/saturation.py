"""Saturation of a load sweep: peak, Th_0.95, Th_limit, client/gray/server labels, margin M,
knee (Kneedle), Malkowski's intervention analysis, USL fit and SLO point.

Design decision: the thresholds and labels follow Alsayasneh (seed 000 §2.4) exactly, with the
monotone rule the thesis's own definition implies (from the first level whose mean throughput
reaches Th_0.95 on, every level is ``server``, even where throughput falls after the peak); the
knee, the saturation point (first ``server`` level), the intervention point and the SLO point
answer different questions and are all reported, none is derived from another.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from tierscope.errors import InputError
from tierscope.qn.usl import fit_usl
from tierscope.spec.analysis import AnalysisOptions

#: Relative tolerance of threshold comparisons, so that a value equal to a threshold computed
#: in floating point (85.5 = 100 x 0.95 x 0.9) lands on the intended side.
_REL_TOL = 1e-9
#: Setups with fewer load levels get no saturation entry.
MIN_LEVELS = 3

__all__ = [
    "MIN_LEVELS",
    "Curve",
    "analyze_saturation",
    "intervention_knee",
    "intervention_point",
    "kneedle",
    "label_levels",
    "margin_from_plus_one",
    "thresholds",
]


def thresholds(peak: float, margin: float, peak_fraction: float = 0.95) -> tuple[float, float]:
    """(Th_0.95, Th_limit) = (peak_fraction x peak, Th_0.95 x (1 - margin))."""
    th95 = peak_fraction * peak
    return th95, th95 * (1.0 - margin)


def _at_least(value: float, threshold: float) -> bool:
    return value >= threshold - _REL_TOL * abs(threshold)


def label_levels(throughput: Sequence[float], th95: float, th_limit: float) -> list[str]:
    """Labels of a sweep's mean throughputs, in level order, by the monotone rule.

    From the first level with throughput >= Th_0.95 on: ``server``; before it ``client`` below
    Th_limit and ``gray`` in [Th_limit, Th_0.95).
    """
    labels: list[str] = []
    server = False
    for x in throughput:
        server = server or _at_least(x, th95)
        if server:
            labels.append("server")
        elif _at_least(x, th_limit):
            labels.append("gray")
        else:
            labels.append("client")
    return labels


def margin_from_plus_one(
    levels: Sequence[float],
    base: Sequence[float],
    plus_one: Sequence[float],
    th95: float,
    gain: float = 0.02,
) -> tuple[float, tuple[float, float | None], float] | None:
    """Margin M from a "+1 node" companion sweep (seed 000 §2.5), or None if it never helps.

    The first beneficial level n* is the first level where the companion's throughput is at
    least ``(1 + gain)`` times the base's. M must put n* in the gray zone and the level before
    it (n-) outside: M in [1 - T(n*)/Th_0.95, 1 - T(n-)/Th_0.95). Returns (M, range, n*) with M
    the middle of the range, or its lower end when n* is the first level (no upper end), and
    M clamped to [0, 1).
    """
    for i, (b, p) in enumerate(zip(base, plus_one, strict=True)):
        if p >= (1.0 + gain) * b:
            lo = max(0.0, 1.0 - b / th95)
            hi = None if i == 0 else max(lo, 1.0 - base[i - 1] / th95)
            m = lo if hi is None else 0.5 * (lo + hi)
            return min(m, 1.0 - 1e-12), (lo, hi), float(levels[i])
    return None


def kneedle(x: Sequence[float], y: Sequence[float], sensitivity: float = 1.0) -> float | None:
    """The knee of a concave increasing curve by Kneedle (Satopää et al., 2011), offline.

    x and y are normalised to [0, 1]; the difference curve d = y_n - x_n has local maxima; the
    first local maximum after which d falls to its threshold d_max - S x mean(dx_n) before the
    next local maximum is the knee. None when the curve has fewer than 3 points or is flat.
    """
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 3 or np.ptp(xa) <= 0 or np.ptp(ya) <= 0:
        return None
    xn = (xa - xa.min()) / np.ptp(xa)
    yn = (ya - ya.min()) / np.ptp(ya)
    d = yn - xn
    n = d.size
    maxima = [i for i in range(1, n - 1) if d[i] >= d[i - 1] and d[i] > d[i + 1]]
    if d[-1] > d[-2]:
        maxima.append(n - 1)
    if not maxima:
        return None
    step = float(np.mean(np.diff(xn)))
    for k, i in enumerate(maxima):
        threshold = d[i] - sensitivity * step
        stop = maxima[k + 1] if k + 1 < len(maxima) else n
        if any(d[j] <= threshold + 1e-12 for j in range(i + 1, stop)):
            return float(xa[i])
    best = int(np.argmax(d))
    return float(xa[best]) if d[best] > 0 else None


def intervention_knee(levels: Sequence[float], throughput: Sequence[float]) -> dict[str, Any]:
    """Malkowski's intervention model (seed 001 §2.1, eqs. 3-7) applied to the throughput.

    The first differences per unit of load, dX_w = (X_w - X_{w-1}) / (w - w_-), are modelled as
    mu before the crossover c and mu' from c on (an abrupt, permanent change). c is the split
    with the least squared error (at least two differences on each side); a Welch t test gives
    the p-value of mu != mu'. ``level`` is c, the first level of the new regime.
    """
    w = np.asarray(levels, dtype=float)
    x = np.asarray(throughput, dtype=float)
    none = {
        "level": None,
        "method": "intervention-throughput",
        "p_value": None,
        "mean_before": None,
        "mean_after": None,
    }
    if w.size < 5:
        return none
    dx = np.diff(x) / np.diff(w)
    best: tuple[float, int] | None = None
    for c in range(2, dx.size - 1):
        a, b = dx[:c], dx[c:]
        sse = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
        if best is None or sse < best[0]:
            best = (sse, c)
    if best is None:
        return none
    c = best[1]
    a, b = dx[:c], dx[c:]
    if np.allclose(a, a[0]) and np.allclose(b, b[0]):
        p = 0.0 if not math.isclose(a[0], b[0]) else 1.0
    else:
        # one side nearly constant (e.g. equal slopes past the peak): scipy warns of precision
        # loss in the variance; the p-value is still the right answer (or NaN, reported None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return {
        "level": float(w[c + 1]),
        "method": "intervention-throughput",
        "p_value": p if math.isfinite(p) else None,
        "mean_before": float(a.mean()),
        "mean_after": float(b.mean()),
    }


def intervention_point(
    levels: Sequence[float], satisfaction: Sequence[float], floor: float = 0.90
) -> float | None:
    """Malkowski's intervention point w* (seed 001 eq. 10) from SLO satisfaction per level.

    Walking up the levels, the lower band mean - 1.96 x SD (sample SD, as Table 7 of the thesis
    confirms) of the satisfaction values seen so far is compared with ``floor``; the first level
    where it falls below is w*. None if it never does.
    """
    s = np.asarray(satisfaction, dtype=float)
    for k in range(1, s.size):
        prefix = s[: k + 1]
        if prefix.mean() - 1.96 * prefix.std(ddof=1) < floor:
            return float(levels[k])
    return None


@dataclass(frozen=True)
class Curve:
    """The throughput curve of one setup: one entry per level, in level order."""

    setup: str
    levels: np.ndarray
    throughput: np.ndarray
    std: list[float | None]
    minimum: np.ndarray
    maximum: np.ndarray
    reps: list[int]
    rt_mean: list[float | None]
    rt_p95: list[float | None]
    slo_stat: list[float | None]
    per_rep: list[tuple[float, int]]

    @classmethod
    def of(cls, points: pl.DataFrame, setup: str, slo_statistic: str) -> Curve:
        rows = points.filter(pl.col("setup") == setup).sort("level", "rep")

        def opt_mean(col: str) -> pl.Expr:
            if col in rows.columns:
                return pl.col(col).cast(pl.Float64).mean().alias(col)
            return pl.lit(None, pl.Float64).alias(col)

        agg = (
            rows.group_by("level", maintain_order=True)
            .agg(
                pl.col("throughput").mean().alias("x"),
                pl.col("throughput").std(ddof=1).alias("sd"),
                pl.col("throughput").min().alias("lo"),
                pl.col("throughput").max().alias("hi"),
                pl.len().alias("n"),
                opt_mean("rt_mean"),
                opt_mean("rt_p95"),
                opt_mean(slo_statistic).alias("slo"),
            )
            .sort("level")
        )
        return cls(
            setup=setup,
            levels=agg["level"].to_numpy().astype(float),
            throughput=agg["x"].to_numpy().astype(float),
            std=[_finite_or_none(v) for v in agg["sd"].to_list()],
            minimum=agg["lo"].to_numpy().astype(float),
            maximum=agg["hi"].to_numpy().astype(float),
            reps=[int(v) for v in agg["n"].to_list()],
            rt_mean=[_finite_or_none(v) for v in agg["rt_mean"].to_list()],
            rt_p95=[_finite_or_none(v) for v in agg["rt_p95"].to_list()],
            slo_stat=[_finite_or_none(v) for v in agg["slo"].to_list()],
            per_rep=[(float(lv), int(r)) for lv, r in rows.select("level", "rep").iter_rows()],
        )


def _finite_or_none(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(float(v)) else None


def analyze_saturation(
    points: pl.DataFrame | None,
    options: AnalysisOptions,
    *,
    companions: Mapping[str, str] | None = None,
    open_workload: bool = False,
    slo_satisfaction: dict[tuple[str, float], float] | None = None,
) -> list[dict[str, Any]]:
    """One saturation entry per setup of ``points`` (PRODUCT.md §4.5 ``saturation``).

    ``slo_satisfaction`` maps (setup, level) to the fraction of requests meeting the SLO, for
    the intervention point; ``companions`` maps a base setup to its "+1 node" companion;
    ``open_workload``: the levels are arrival rates (an open workload), not users.
    """
    if points is None or points.height == 0:
        return []
    for col in ("setup", "level", "throughput"):
        if col not in points.columns:
            raise InputError(f"points.{col}", None, "a column of points.parquet")
    # A level without a finite throughput (NaN from a level that completed no request, or an
    # imported gap) says nothing about saturation: skipped, and said so in the entry's notes.
    usable = pl.col("throughput").is_finite().fill_null(False) & pl.col(
        "level"
    ).is_finite().fill_null(False)
    skipped = {
        str(setup): levels
        for setup, levels in points.filter(~usable)
        .group_by("setup")
        .agg(pl.col("level"))
        .iter_rows()
    }
    points = points.filter(usable)
    if "rep" not in points.columns:
        points = points.with_columns(pl.lit(0, pl.Int64).alias("rep"))
    setups = sorted(points["setup"].unique().to_list())
    curves = {s: Curve.of(points, s, options.slo_statistic) for s in setups}
    # a curve needs a few levels to saturate on; fewer say nothing about saturation
    curves = {s: c for s, c in curves.items() if c.levels.size >= MIN_LEVELS}
    companions = dict(companions or {})
    base_of = {c: b for b, c in companions.items()}

    margins: dict[str, tuple[float, str, list[float | None] | None]] = {}
    for setup, curve in curves.items():
        companion = companions.get(setup)
        peak = float(curve.throughput.max())
        th95 = options.peak_fraction * peak
        if companion in curves:
            other = curves[companion]
            common = np.intersect1d(curve.levels, other.levels)
            base = [float(curve.throughput[curve.levels == lv][0]) for lv in common]
            plus = [float(other.throughput[other.levels == lv][0]) for lv in common]
            found = margin_from_plus_one(common, base, plus, th95, options.plus_one_gain)
            if found is not None:
                m, (lo, hi), n_star = found
                src = f"plus-one:{companion} (first beneficial level {n_star:g})"
                margins[setup] = (m, src, [lo, hi])
                continue
            margins[setup] = (
                options.margin,
                f"default (companion {companion} never gains {options.plus_one_gain:.0%})",
                None,
            )
        else:
            margins[setup] = (options.margin, "default", None)
    for companion, base in base_of.items():  # a companion is labelled with its base's M
        if companion in margins and base in margins and margins[companion][1] == "default":
            margins[companion] = (margins[base][0], f"from base setup {base}", margins[base][2])

    out = []
    for setup, curve in curves.items():
        m, m_source, m_range = margins[setup]
        entry = _saturation_entry(
            curve, m, m_source, m_range, options, open_workload, slo_satisfaction or {}
        )
        if setup in skipped:
            levels = ", ".join(f"{v:g}" for v in skipped[setup] if v is not None)
            entry["notes"].append(
                f"{len(skipped[setup])} point(s) without a finite throughput or level skipped"
                + (f" (levels {levels})" if levels else "")
            )
        out.append(entry)
    return out


def _saturation_entry(
    curve: Curve,
    margin: float,
    margin_source: str,
    margin_range: list[float | None] | None,
    options: AnalysisOptions,
    open_mode: bool,
    slo_satisfaction: dict[tuple[str, float], float],
) -> dict[str, Any]:
    x = curve.throughput
    i_peak = int(np.argmax(x))
    peak = float(x[i_peak])
    th95, th_limit = thresholds(peak, margin, options.peak_fraction)
    labels = label_levels(x, th95, th_limit)
    first_server = next(i for i, lab in enumerate(labels) if lab == "server")
    label_of = dict(zip(curve.levels.tolist(), labels, strict=True))
    notes = []
    if first_server == 0:
        notes.append("the server limits throughput at every level: no client or gray level")
    if i_peak == x.size - 1 and x.size > 1:
        notes.append("the peak is at the highest level: the sweep may stop before saturation")

    knee = kneedle(curve.levels, x)
    intervention = intervention_knee(curve.levels, x)
    slo_level = None
    slo_w = None
    if options.slo_s is not None:
        stat = curve.slo_stat
        if all(v is None for v in stat):
            notes.append(f"no {options.slo_statistic} in points: no SLO point")
        else:
            ok_levels = []
            for lv, v in zip(curve.levels, stat, strict=True):
                if v is None or v > options.slo_s:
                    break
                ok_levels.append(float(lv))
            slo_level = ok_levels[-1] if ok_levels else None
        sat = [slo_satisfaction.get((curve.setup, float(lv))) for lv in curve.levels]
        if all(v is not None for v in sat) and len(sat) >= 2:
            slo_w = intervention_point(curve.levels, sat, options.slo_satisfaction)

    return {
        "setup": curve.setup,
        "peak_level": float(curve.levels[i_peak]),
        "peak_throughput": peak,
        "th95": th95,
        "th_limit": th_limit,
        "margin": margin,
        "margin_source": margin_source,
        "margin_range": margin_range,
        "first_server_level": float(curve.levels[first_server]),
        "knee_level": knee,
        "slo_level": slo_level,
        "intervention": intervention,
        "slo_intervention_level": slo_w,
        "labels": [{"level": lv, "rep": rep, "label": label_of[lv]} for lv, rep in curve.per_rep],
        "curve": [
            {
                "level": float(lv),
                "reps": curve.reps[i],
                "throughput": float(x[i]),
                "throughput_std": curve.std[i],
                "throughput_min": float(curve.minimum[i]),
                "throughput_max": float(curve.maximum[i]),
                "rt_mean": curve.rt_mean[i],
                "rt_p95": curve.rt_p95[i],
                "label": labels[i],
            }
            for i, lv in enumerate(curve.levels)
        ],
        "usl": _usl(curve, open_mode),
        "notes": notes,
    }


def _usl(curve: Curve, open_mode: bool) -> dict[str, Any] | None:
    if open_mode:  # levels are rates: the concurrency is N = X R (Little's law)
        if any(r is None for r in curve.rt_mean):
            return None
        n = curve.throughput * np.array(curve.rt_mean, dtype=float)
        source = "little"
    else:
        n, source = curve.levels, "level"
    keep = (n > 0) & (curve.throughput > 0)
    if np.unique(n[keep]).size < 3:
        return None
    try:
        fit = fit_usl(n[keep], curve.throughput[keep])
    except InputError:
        return None
    doc = fit.to_dict()
    return {
        "sigma": doc["sigma"],
        "kappa": doc["kappa"],
        "lambda": doc["lambda"],
        "n_peak": doc["n_peak"],
        "x_peak": doc["x_peak"],
        "r2": doc["r2"],
        "concurrency": source,
    }
