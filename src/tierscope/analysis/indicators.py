"""Which metrics are trustworthy indicators of saturation (Alsayasneh, seed 000 §2.6-2.7).

The thesis classifies each metric's curve over a sweep by eye; this module writes the rule down
so that it holds on the short sweeps a single machine affords (5-10 levels). For one setup, with
levels n_1 < ... < n_K, the metric's mean x_k per level, the labels of the saturation analysis,
g the first gray level (or the first server level s if there is none):

1. ``unidentified`` when the first level is already ``server`` (nothing to compare with) or the
   sweep has fewer than :data:`MIN_LEVELS` levels; the verdict says which, as ``insufficient``.
2. Trend change, by two families of continuous piecewise-linear fits searched exhaustively over
   breakpoints at the levels: *ramps* a + c * clip(n, b1, b2) (linear-constant, constant-linear,
   constant-linear-constant, a step: the thesis's reliable and misleading shapes, with no more
   coefficients than a line) and *bends*, a line plus one hinge (two from 8 levels):
   linear-linear, rise-then-fall. A fit's score is its BIC gain over the straight line (a
   breakpoint counts as a parameter). The p-value is a permutation test: the line's residuals,
   scaled by their leverage, are reordered (all orderings up to 6 levels, else ``permutations``
   seeded ones) and added back to the line; on each such curve the whole search is rerun, and
   the two families' p-values are combined by their minimum, calibrated on the same curves
   (Westfall and Young's min-p). The change counts when p < ``change_p`` and the best fit
   departs from the line by at least ``min_effect`` of the metric's range. Otherwise ``not
   reliable`` (``constant`` or ``linear``: whether a line explains half the variation).
3. The shift zone is [n_{g-1}, n_{s+1}] (one level either side of the gray zone and the first
   server level). No breakpoint in it: ``misleading`` (a change, at the wrong load).
4. A breakpoint in the zone and one threshold separates all client values (gray values if there
   are no client levels) from all server values: ``reliable``. Otherwise ``partially reliable``
   (the trend tells, a single value does not).

Design decision: the F test of a segmented fit assumes Gaussian noise and pays for each
breakpoint with a residual degree of freedom; on 6 levels a two-break fit keeps 2 and even a clean
rise-then-flatten is not significant. Ramps spend no coefficient on their flat parts; the
permutation test assumes exchangeable noise only and pays for the search over breakpoints and
families (the search is rerun inside the null distribution): on pure noise and on steep lines
plus noise at 5-10 levels it fires in 3-4 % of the curves at p < 0.05. It costs one matrix
product per metric: every candidate model of a set of levels is an orthonormal basis computed
once, all side by side.

Across setups: ``misleading`` if misleading in any setup (the thesis's rule: do not rely on it)
or if it is reliable or partially reliable in several setups but moves the other way into
saturation in some (a threshold learnt on one points the wrong way on another). Each setup's
verdict is a test with a small false-positive rate, so over a corpus of many setups "any" reads
as "at least one setup in ten" (:data:`MISLEADING_SHARE`; the thesis's rule up to ten setups):
otherwise one chance verdict among 24 setups would condemn every metric. ``unidentified``
if no setup is identifiable; else ``reliable`` if reliable in at least half of the identifiable
setups, ``partially reliable`` if reliable or partially reliable in at least half, else ``not
reliable``. Covering sets: the smallest sets of metrics such that every identifiable setup has a
reliable metric in the set (or as many setups as any set can cover), for any metric, server-side
metrics only (tier other than ``client``) and metrics never misleading. Both the cross-setup
rules and the covering sets need at least two identifiable setups: with one, each indicator and
each covering variant carries ``insufficient`` instead of a verdict it cannot support.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tierscope.analysis._windows import in_steady_windows
from tierscope.spec.analysis import AnalysisOptions

__all__ = [
    "CATEGORIES",
    "MIN_LEVELS",
    "PatternVerdict",
    "aggregate",
    "analyze_indicators",
    "change_test",
    "classify_pattern",
    "covering_sets",
    "metric_levels",
    "segmented_fit",
]

R, PR, NR, M, U = "reliable", "partially reliable", "not reliable", "misleading", "unidentified"
CATEGORIES = (R, PR, NR, M, U)
#: Fewest levels on which a trend change can be tested (a one-break fit leaves 1 degree of
#: freedom on 5 levels, and the smallest permutation p-value there is 1/120).
MIN_LEVELS = 5
#: Up to this many orderings (6 levels) the permutation test enumerates them all.
EXHAUSTIVE = 720
#: Across setups, the share of identifiable setups whose verdict must be "misleading" (or the
#: other way round) for the metric to be misleading: one setup up to ten, then one in ten.
MISLEADING_SHARE = 0.1
#: Columns of :func:`metric_levels`: one row per (setup, level, metric).
LEVELS_SCHEMA = {
    "setup": pl.String,
    "level": pl.Float64,
    "name": pl.String,
    "tier": pl.String,
    "value": pl.Float64,
}
#: Largest number of metric combinations searched exhaustively for a covering set.
MAX_COMBINATIONS = 300_000
ONE_SETUP = (
    "one setup: misleading across setups (a change at the shift in one setup, at another load "
    "or the other way in another) and covering combinations need at least 2 identifiable setups"
)


@dataclass(frozen=True)
class Fit:
    breaks: tuple[float, ...]
    rss: float
    fitted: np.ndarray


def _design(x: np.ndarray, breaks: Sequence[float]) -> np.ndarray:
    return np.column_stack([np.ones_like(x), x] + [np.maximum(x - b, 0.0) for b in breaks])


def _hinge_fit(x: np.ndarray, y: np.ndarray, breaks: Sequence[float]) -> Fit:
    design = _design(x, breaks)
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


RAMP, BEND = 0, 1


@dataclass(frozen=True)
class _Models:
    """Every candidate model of one set of levels (the line first), each as an orthonormal
    basis; the bases side by side in one matrix, so one product fits them all."""

    breaks: list[tuple[float, ...]]
    family: np.ndarray  # RAMP or BEND (-1 for the line)
    penalty: np.ndarray  # parameters beyond the line's two: extra coefficients and breakpoints
    starts: np.ndarray  # first column of each model's basis in ``basis``
    sizes: np.ndarray
    basis: np.ndarray  # K x (sum of model sizes)


@functools.lru_cache(maxsize=256)
def _models(levels: tuple[float, ...]) -> _Models:
    """Ramps a + c * clip(n, b1, b2) with b1 < b2 any two levels but the first and last (the
    line): linear-constant, constant-linear, constant-linear-constant and steps, the thesis's
    reliable and misleading shapes, with the line's two coefficients. Bends: the line plus
    hinges max(n - b, 0) at 1 interior level (2 from 8 levels): linear-linear, rise-then-fall."""
    x = np.asarray(levels, dtype=float)
    K = x.size
    designs = [np.column_stack([np.ones(K), x])]
    breaks: list[tuple[float, ...]] = [()]
    family, penalty = [-1], [0]
    for i, j in itertools.combinations(range(K), 2):
        if (i, j) != (0, K - 1):
            designs.append(np.column_stack([np.ones(K), np.clip(x, x[i], x[j])]))
            inner = tuple(float(x[m]) for m in (i, j) if 0 < m < K - 1)
            breaks.append(inner)
            family.append(RAMP)
            penalty.append(len(inner))
    for k in range(1, (1 if K < 8 else 2) + 1):
        for combo in itertools.combinations(x[1:-1].tolist(), k):
            designs.append(_design(x, combo))
            breaks.append(tuple(float(b) for b in combo))
            family.append(BEND)
            penalty.append(2 * k)
    bases = [np.linalg.qr(d)[0] for d in designs]
    sizes = np.array([q.shape[1] for q in bases])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return _Models(
        breaks, np.array(family), np.array(penalty, float), starts, sizes, np.hstack(bases)
    )


@functools.lru_cache(maxsize=32)
def _orderings(size: int, count: int, seed: int) -> tuple[np.ndarray, bool]:
    """Reorderings of ``size`` residuals: all of them when there are at most
    max(count, :data:`EXHAUSTIVE`) (True), else ``count`` seeded random ones (False)."""
    if math.factorial(size) <= max(count, EXHAUSTIVE):
        return np.array(list(itertools.permutations(range(size)))), True
    rng = np.random.default_rng([seed, size])
    return rng.permuted(np.tile(np.arange(size), (count, 1)), axis=1), False


def _gains(models: _Models, curves: np.ndarray) -> np.ndarray:
    """BIC gain over the line of every model (columns, the line's excluded) on every curve
    (rows): K log(RSS_line / RSS_model) - penalty log K."""
    n = curves.shape[1]
    total = (curves * curves).sum(axis=1)
    # einsum, not BLAS: a threaded BLAS is 50x slower on these small products on a busy machine
    proj = np.einsum("bk,kc->bc", curves, models.basis)
    rss = np.maximum(total[:, None] - np.add.reduceat(proj * proj, models.starts, axis=1), 0.0)
    floor = (1e-12 * rss[:, 0] + 1e-300)[:, None]
    log_rss = np.log(np.maximum(rss, floor))
    return n * (log_rss[:, :1] - log_rss[:, 1:]) - models.penalty[1:] * math.log(n)


def _upper_p(stat: np.ndarray) -> np.ndarray:
    """For each entry, the fraction of entries at least as large (ties count)."""
    tol = 1e-9 * np.maximum(1.0, np.abs(stat))
    return 1.0 - np.searchsorted(np.sort(stat), stat - tol, side="left") / stat.size


@dataclass(frozen=True)
class ChangeTest:
    """The segmented fit that departs most from a straight line, and how surprising it is."""

    breaks: tuple[float, ...]
    family: str  # "ramp" or "bend"
    fitted: np.ndarray
    line: np.ndarray
    p_value: float
    orderings: int  # null curves the p-value is computed from
    enumerated: bool  # every ordering of the residuals (else a seeded sample)


def change_test(
    levels: Sequence[float], values: Sequence[float], *, permutations: int = 999, seed: int = 0
) -> ChangeTest | None:
    """Permutation test of a trend change (rule 2 of the module docstring); None when the
    curve is too short or a straight line to rounding (no residual to reorder).

    Each reordering of the line's (leverage-scaled) residuals, added back to the line, is a
    curve of the null hypothesis; on the observed curve and on every null curve each family's
    statistic is its best BIC gain over the line. The two families' p-values are combined by
    their minimum, itself calibrated on the same curves (Westfall and Young's min-p), so that
    searching two families costs no false positives. p = (1 + null curves at least as extreme)
    / (1 + null curves).
    """
    x = np.asarray(levels, dtype=float)
    y = np.asarray(values, dtype=float)
    if x.size < MIN_LEVELS:
        return None
    models = _models(tuple(x.tolist()))
    q0 = models.basis[:, :2]
    line = q0 @ (q0.T @ y)
    resid = y - line
    scale = max(float(np.ptp(y)), float(np.abs(y).max()), 1e-300)
    if float(np.abs(resid).max()) <= 1e-9 * scale:
        return None
    perms, enumerated = _orderings(x.size, permutations, seed)
    # residuals scaled by their leverage (Davison and Hinkley's modified residuals): a line's
    # residuals are smaller than the noise, most at the ends, and reordered raw they make null
    # curves that are too clean around a steep line (13 % false positives at p < 0.05)
    modified = resid / np.sqrt(np.maximum(1.0 - (q0 * q0).sum(axis=1), 1e-12))
    modified -= modified.mean()
    gains = _gains(models, np.vstack([y, line + modified[perms]]))
    fam = models.family[1:]
    min_p = np.min([_upper_p(gains[:, fam == f].max(axis=1)) for f in (RAMP, BEND)], axis=0)
    p = float(np.mean(min_p <= min_p[0] * (1 + 1e-9)))  # row 0, the observed curve, counts
    j = 1 + int(gains[0].argmax())
    cols = models.basis[:, models.starts[j] : models.starts[j] + models.sizes[j]]
    return ChangeTest(
        models.breaks[j],
        "ramp" if models.family[j] == RAMP else "bend",
        cols @ (cols.T @ y),
        line,
        p,
        len(perms),
        enumerated,
    )


@dataclass(frozen=True)
class PatternVerdict:
    """One metric on one setup: its category, the fit behind it and why."""

    category: str
    breaks: tuple[float, ...]
    p_value: float | None = None
    effect: float = 0.0
    separable: bool = False
    evidence: str = ""
    shape: str | None = None
    direction: str | None = None
    threshold: float | None = None
    zone: tuple[float, float] | None = None
    orderings: int | None = None
    levels: int = 0
    #: (min, max) of the client-bound values and of the server-bound values compared.
    before: tuple[float, float] | None = None
    after: tuple[float, float] | None = None
    insufficient: str | None = None
    #: (levels in the shift zone, levels where a change can be placed)
    zone_places: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "shape": self.shape,
            "breaks": list(self.breaks),
            "p_value": self.p_value,
            "orderings": self.orderings,
            "effect": self.effect,
            "separable": self.separable,
            "direction": self.direction,
            "threshold": self.threshold,
            "shift_zone": list(self.zone) if self.zone else None,
            "zone_places": list(self.zone_places) if self.zone_places else None,
            "levels": self.levels,
            "evidence": self.evidence,
            "insufficient": self.insufficient,
        }


def _shape(
    x: np.ndarray, fitted: np.ndarray, breaks: Sequence[float], tol: float
) -> tuple[str, tuple[float, ...]]:
    """The thesis's name of a piecewise-linear fit and the breakpoints that separate its named
    segments: a segment is ``constant`` when it moves the curve by less than ``tol``; neighbours
    of the same kind whose slopes have the same sense and differ by less than a factor 2 are
    one segment (the breakpoint between them fits noise, not a change of trend)."""
    knots = np.array([x[0], *breaks, x[-1]])
    at = np.interp(knots, x, fitted)
    parts: list[tuple[str, float]] = []
    kept: list[float] = []
    for i, (rise, run) in enumerate(zip(np.diff(at), np.diff(knots), strict=True)):
        kind, slope = ("constant" if abs(rise) < tol else "linear"), float(rise / run)
        if parts and parts[-1][0] == kind:
            prev = parts[-1][1]
            if kind == "constant" or (
                prev * slope > 0 and min(abs(prev), abs(slope)) >= 0.5 * max(abs(prev), abs(slope))
            ):
                continue
        if parts:
            kept.append(float(knots[i]))
        parts.append((kind, slope))
    return "-".join(kind for kind, _ in parts), tuple(kept)


def _g(v: float) -> str:
    return f"{v:.3g}"


def classify_pattern(
    levels: Sequence[float],
    values: Sequence[float],
    labels: Sequence[str],
    *,
    change_p: float = 0.05,
    min_effect: float = 0.1,
    permutations: int = 999,
    seed: int = 0,
) -> PatternVerdict:
    """Category of one metric's curve over one setup's sweep (rule in the module docstring)."""
    n = np.asarray(levels, dtype=float)
    x = np.asarray(values, dtype=float)
    keep = np.isfinite(x)
    n, x = n[keep], x[keep]
    lab = [lab for lab, k in zip(labels, keep, strict=True) if k]
    K = x.size
    if not lab or lab[0] == "server":
        why = "the server limits every level: no client-bound level to compare with"
        return PatternVerdict(U, (), None, 0.0, False, why, levels=K, insufficient=why)
    if K < MIN_LEVELS:
        why = f"{K} levels: a trend change needs at least {MIN_LEVELS}"
        return PatternVerdict(U, (), None, 0.0, False, why, levels=K, insufficient=why)
    s = lab.index("server") if "server" in lab else K
    g = lab.index("gray") if "gray" in lab else s
    lo, hi = float(n[max(g - 1, 0)]), float(n[min(s + 1, K - 1)])
    before = x[:g] if g > 0 else x[:s]
    after = x[s:]
    base: dict[str, Any] = {
        "levels": K,
        "zone": (lo, hi),
        "before": (float(before.min()), float(before.max())) if before.size else None,
        "after": (float(after.min()), float(after.max())) if after.size else None,
    }
    if before.size and after.size and np.median(after) != np.median(before):
        base["direction"] = "up" if np.median(after) > np.median(before) else "down"
    span = float(np.ptp(x))
    if span <= 1e-12 * max(1.0, float(np.abs(x).max())):
        return PatternVerdict(NR, (), None, 0.0, False, "constant", shape="constant", **base)
    test = change_test(n, x, permutations=permutations, seed=seed)
    if test is None:
        why = "linear: a straight line to rounding, no trend change"
        return PatternVerdict(NR, (), None, 0.0, False, why, shape="linear", **base)
    p = test.p_value
    effect = float(np.abs(test.fitted - test.line).max()) / span
    shape, breaks = _shape(n, test.fitted, test.breaks, min_effect * span)
    where = ", ".join(f"{b:g}" for b in breaks) or "no level (segments alike)"
    how = (
        f"permutation p = {p:.2g} over {'all ' if test.enumerated else ''}{test.orderings} "
        f"orderings; the change moves the curve by {effect:.0%} of its range"
    )
    base |= {"p_value": p, "effect": effect, "orderings": test.orderings}
    if p >= change_p or effect < min_effect or not breaks:
        r2 = 1.0 - float(((x - test.line) ** 2).sum()) / float(((x - x.mean()) ** 2).sum())
        flat = "linear" if r2 >= 0.5 else "constant"
        why = (
            f"p ≥ {change_p:g}"
            if p >= change_p
            else f"under {min_effect:.0%}"
            if effect < min_effect
            else "its segments have alike slopes"
        )
        return PatternVerdict(
            NR,
            breaks,
            shape=flat,
            separable=False,
            evidence=f"{flat} (a line explains {max(r2, 0.0):.0%} of the variation): no trend "
            f"change that counts (best fit {shape}, changing at {where}: {how}; {why})",
            **base,
        )
    in_zone = [b for b in breaks if lo - 1e-9 <= b <= hi + 1e-9]
    places = n[1:-1]
    inside = int(((places >= lo - 1e-9) & (places <= hi + 1e-9)).sum())
    zone_txt = f"shift zone [{lo:g}, {hi:g}]"
    insufficient = None
    if inside == places.size:
        insufficient = (
            f"the {zone_txt} holds every level where a change can be placed: with these levels "
            "a change at the wrong load cannot be told from one at the shift"
        )
    elif 2 * inside >= places.size:
        zone_txt += (
            f" (it holds {inside} of the {places.size} levels where a change can be placed: "
            "where the change falls is weak evidence)"
        )
    separable = bool(
        before.size and after.size and (before.max() < after.min() or before.min() > after.max())
    )
    threshold = None
    if separable:
        up = before.max() < after.min()
        threshold = float(
            (before.max() + after.min()) / 2 if up else (before.min() + after.max()) / 2
        )
    head = (
        f"{shape} from {_g(x[0])} at level {n[0]:g} to {_g(x[-1])} at {n[-1]:g}, trend "
        f"changing at {where}"
    )
    verdict = {
        "shape": shape,
        "threshold": threshold,
        "insufficient": insufficient,
        "zone_places": (inside, int(places.size)),
        **base,
    }
    if not in_zone:
        return PatternVerdict(
            M,
            breaks,
            separable=separable,
            evidence=f"{head}, outside the {zone_txt} ({how}): it changes where the bottleneck "
            "does not shift",
            **verdict,
        )
    if separable:
        side = "above" if base.get("direction") == "up" else "below"
        return PatternVerdict(
            R,
            breaks,
            separable=True,
            evidence=f"{head}, inside the {zone_txt} ({how}); every server-bound value is "
            f"{side} {_g(threshold or 0.0)}, every client-bound value on the other side",
            **verdict,
        )
    b0, b1 = base["before"], base["after"]
    return PatternVerdict(
        PR,
        breaks,
        separable=False,
        evidence=f"{head}, inside the {zone_txt} ({how}); but client-bound values "
        f"[{_g(b0[0])}, {_g(b0[1])}] and server-bound values [{_g(b1[0])}, {_g(b1[1])}] "
        "overlap: the trend tells, a single value does not",
        **verdict,
    )


def aggregate(
    per_setup: Mapping[str, str], directions: Mapping[str, str | None] | None = None
) -> str:
    """One category from the per-setup categories (rule in the module docstring);
    ``directions`` (``up``/``down`` per setup) adds the opposite-direction rule."""
    return _combine(per_setup, directions or {})[0]


def _enough(count: int, identifiable: int) -> bool:
    """Whether ``count`` setups of ``identifiable`` are more than chance verdicts."""
    return count >= max(1, math.ceil(MISLEADING_SHARE * identifiable))


def _combine(
    per_setup: Mapping[str, str], directions: Mapping[str, str | None]
) -> tuple[str, str | None]:
    cats = list(per_setup.values())
    known = [c for c in cats if c != U]
    bad = [s for s, c in per_setup.items() if c == M]
    if bad and _enough(len(bad), len(known)):
        good = [s for s, c in per_setup.items() if c in (R, PR)]
        why = f"misleading in {', '.join(sorted(bad))}"
        return M, why + (f" although it tells in {', '.join(sorted(good))}" if good else "")
    if not known:
        return U, None
    moving = {s: directions.get(s) for s, c in per_setup.items() if c in (R, PR)}
    up = sorted(s for s, d in moving.items() if d == "up")
    down = sorted(s for s, d in moving.items() if d == "down")
    if up and down and _enough(min(len(up), len(down)), len(known)):
        return M, (
            f"it rises into saturation in {', '.join(up)} but falls in {', '.join(down)}: a "
            "threshold learnt on one setup points the wrong way on another"
        )
    half = len(known) / 2
    if sum(c == R for c in known) >= half:
        return R, None
    if sum(c in (R, PR) for c in known) >= half:
        return PR, None
    return NR, None


def covering_sets(
    matrix: Mapping[str, Mapping[str, str]],
    tiers: Mapping[str, str],
    overall: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Smallest metric sets covering the identifiable setups with reliable metrics.

    ``matrix`` is {metric: {setup: category}}; ``tiers`` gives each metric's tier (``client``
    metrics are not server-side); ``overall`` each metric's category across setups (a metric
    misleading only across setups, by its sense, is not "never misleading"). Returns one entry
    per variant: any, server-side, never misleading; with fewer than two identifiable setups
    each entry is empty and says why in ``insufficient``.
    """
    setups = sorted({s for row in matrix.values() for s in row})
    identifiable = [s for s in setups if any(row.get(s, U) != U for row in matrix.values())]
    variants = {
        "any": lambda m: True,
        "server-side": lambda m: tiers.get(m) != "client",
        "never misleading": lambda m: M not in matrix[m].values() and (overall or {}).get(m) != M,
    }
    if len(identifiable) < 2:
        why = (
            f"one identifiable setup ({identifiable[0]}): a combination that covers setups "
            "needs at least 2; the setup's reliable metrics are the indicators marked reliable"
            if identifiable
            else "no identifiable setup: nothing to cover"
        )
        return [
            {"variant": v, "metrics": [], "covered": [], "uncovered": [], "insufficient": why}
            for v in variants
        ]
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
                "insufficient": None,
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
        return pl.DataFrame(schema=LEVELS_SCHEMA)
    return pl.concat(frames).sort("name", "setup", "level")


def _common_threshold(verdicts: Mapping[str, PatternVerdict]) -> float | None:
    """One value separating the client-bound from the server-bound values of every setup."""
    sides = [v for v in verdicts.values() if v.category == R and v.before and v.after]
    if len(sides) < 2 or len({v.direction for v in sides}) != 1:
        return None
    client_hi = max(v.before[1] for v in sides if v.before)
    client_lo = min(v.before[0] for v in sides if v.before)
    server_lo = min(v.after[0] for v in sides if v.after)
    server_hi = max(v.after[1] for v in sides if v.after)
    if sides[0].direction == "up" and client_hi < server_lo:
        return (client_hi + server_lo) / 2
    if sides[0].direction == "down" and server_hi < client_lo:
        return (server_hi + client_lo) / 2
    return None


def _summary(name: str, tier: str, verdicts: dict[str, PatternVerdict]) -> dict[str, Any]:
    """One indicator of the document: the category across setups, the evidence, and each
    setup's verdict; the top-level shape, p-value and effect are those of the setups that agree
    with the category (the largest p-value, the smallest effect: the weakest evidence)."""
    per = {s: v.category for s, v in sorted(verdicts.items())}
    category, reason = _combine(per, {s: v.direction for s, v in verdicts.items()})
    known = [s for s, c in per.items() if c != U]
    agreeing = [verdicts[s] for s in known if per[s] == category]
    shapes = {v.shape for v in agreeing}
    ways = {v.direction for v in agreeing}
    ps = [v.p_value for v in agreeing if v.p_value is not None]
    threshold = None
    if category == R:
        threshold = agreeing[0].threshold if len(known) == 1 else _common_threshold(verdicts)
    if not known:
        reasons = sorted({v.insufficient or v.evidence for v in verdicts.values()})
        insufficient: str | None = "no identifiable setup: " + "; ".join(reasons)
    elif len(known) == 1:
        own = verdicts[known[0]].insufficient
        insufficient = ONE_SETUP + (f"; {own}" if own else "")
    else:
        insufficient = None
    lines = [reason] if reason and len(known) > 1 else []
    if len(known) >= 2 and category == R:
        lines.append(
            f"one value ({_g(threshold)}) separates client- from server-bound values in every setup"
            if threshold is not None
            else "the separating value differs between setups: a value tells within a setup, "
            "not across"
        )
    lines += [
        f"{s}: {per[s]} ({verdicts[s].evidence})" if len(per) > 1 else verdicts[s].evidence
        for s in per
    ]
    return {
        "metric": name,
        "tier": tier,
        "category": category,
        "per_setup": per,
        "counts": {c: sum(v == c for v in per.values()) for c in CATEGORIES if c in per.values()},
        "evidence": "; ".join(lines),
        "shape": shapes.pop() if len(shapes) == 1 else None,
        "p_value": max(ps) if ps else None,
        "effect": min(v.effect for v in agreeing) if agreeing and ps else None,
        "direction": ways.pop() if len(ways) == 1 else None,
        "threshold": threshold,
        "setups": {s: verdicts[s].to_json() for s in per},
        "insufficient": insufficient,
    }


def analyze_indicators(
    levels: pl.DataFrame,
    saturation: Sequence[Mapping[str, Any]],
    options: AnalysisOptions,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(indicators, covering sets) from :func:`metric_levels` and the saturation entries."""
    labels = {s["setup"]: {c["level"]: c["label"] for c in s["curve"]} for s in saturation}
    verdicts: dict[str, dict[str, PatternVerdict]] = {}
    tiers: dict[str, str] = {}
    for (name, setup), frame in levels.group_by("name", "setup", maintain_order=True):
        if setup not in labels:
            continue
        frame = frame.sort("level")
        lv = frame["level"].to_list()
        lab = [labels[setup].get(v) for v in lv]
        keep = [i for i, v in enumerate(lab) if v is not None]
        vals = frame["value"].to_list()
        verdict = classify_pattern(
            [lv[i] for i in keep],
            [vals[i] for i in keep],
            [str(lab[i]) for i in keep],
            change_p=options.change_p,
            min_effect=options.min_effect,
            permutations=options.permutations,
            seed=options.seed,
        )
        verdicts.setdefault(str(name), {})[str(setup)] = verdict
        tiers[str(name)] = str(frame["tier"][0])
    indicators = [_summary(m, tiers[m], verdicts[m]) for m in sorted(verdicts)]
    order = {c: i for i, c in enumerate(CATEGORIES)}
    indicators.sort(key=lambda d: (order[d["category"]], d["metric"]))
    matrix = {m: {s: v.category for s, v in row.items()} for m, row in verdicts.items()}
    overall = {d["metric"]: d["category"] for d in indicators}
    return indicators, covering_sets(matrix, tiers, overall)
