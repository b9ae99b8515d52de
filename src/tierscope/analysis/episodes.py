"""Episode groups: the causes behind a run's episodes, so that "a train of 24 stalls of ~0.3 s
every 5 s, rooted at app" and "db cpu saturated at levels 60-100" come before the episode list.

The unit is an *occurrence*: the episodes of one incident (``millibottlenecks.assign_roots``)
with one root tier, e.g. the web and app episodes of one app stall. It is a *stall* when its
root was found paused as it began; its onset is then the moment the tier froze (the sharpest
there is), else its first episode's start. Per root tier, in this order:

1. **Periodic trains.** Main design decision: scheduled causes restart with each load level
   (the runner starts a level's faults with its load), so a period is shared across the run
   but the phase is not, and only gaps within one (setup, level, rep) window count. An
   occurrence at t is *linked* when another one of its window follows at t + mP +- tol for
   some m in 1..3 (missed occurrences allowed), tol = max(2 analysis windows, x P), x tried
   at 2, 3 and 4 % (a busy host blurs the onsets of stalls; the p-value pays for the tries).
   Candidate periods: the gaps to the next three occurrences divided by 1..3, at least
   tol / 0.1 and twice the typical duration. If the occurrences came at random (a Poisson
   process at each window's own rate r), an occurrence would be linked with probability at
   most 1 - exp(-2 tol r k), k the multiples that fit before its window ends, and by
   Hoeffding's theorem the number linked would reach c >= n p + 1 no more often than a
   binomial of the same mean p does. A train needs that tail probability, times the number of
   distinct candidate periods and of occurrence sets tried (all the root's occurrences, and its
   stalls alone), below 0.001, three links or more, and linked gaps sharper than a uniform
   spread over +-tol (quasi-regular episodes of a busy tier, whose gaps merely cluster around
   a typical value, are not a schedule). The period is the least-squares fit over the links,
   and the longest one every link fits. The occurrences linked to or from form the train,
   joined by the root's other occurrences on its lattice in the windows where it was seen; a
   second train is searched among the rest.
2. **Saturation intervals.** Where the bottleneck analysis names the root's resource the
   bottleneck of a level, the root's remaining non-stall occurrences in the run of such
   levels are that resource's saturation. Then the remaining occurrences of kind
   ``saturation`` (a second or longer) that are not stalls follow each other when the next
   starts within the longer one's duration of the previous one's end or, in a sweep, in the
   same or the next window of the same setup; the root's other non-stall occurrences in those
   windows (or that time) belong to it: they are the same saturated tier.
3. **One-offs:** the rest, one group per root tier, kind, and stall or not.

Each group counts the VLRT requests its episodes explain (each request once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.stats import binom

from tierscope.analysis.millibottlenecks import overlapping

__all__ = [
    "Occurrence",
    "Period",
    "bottleneck_levels",
    "find_period",
    "group_episodes",
    "segments_of",
]

#: Largest multiple of the period between two linked occurrences (missed occurrences between).
MAX_MULTIPLE = 3
#: Family-wise significance of a train over all candidate periods and occurrence sets.
ALPHA = 1e-3
#: Fewest linked occurrences that make a train.
MIN_LINKS = 3
#: Relative tolerances of a gap around a multiple of the period, each tried (the p-value pays
#: for the tries): a tight one keeps chance links out, a loose one keeps the links of stalls
#: whose onsets a busy host blurred.
REL_TOLS = (0.02, 0.03, 0.04)
#: Largest tolerance relative to the period: shorter periods are not resolved.
MAX_REL_TOL = 0.1
#: z score (one-sided p 0.01) by which linked gaps must be sharper than a uniform spread.
SHARP_Z = 2.33
_KIND_ORDER = {"periodic": 0, "saturation": 1, "one-off": 2}

Span = tuple[float, float, str, float | None, int | None]


@dataclass
class Occurrence:
    """The episodes of one incident with one root tier."""

    root: str
    kind: str
    onset: float
    end: float
    episodes: list[int]
    segment: int = 0
    pause: float | None = None  # how long the root was frozen, if it was

    @property
    def duration(self) -> float:
        return self.end - self.onset


@dataclass(frozen=True)
class Period:
    """A periodic train among the onsets given to :func:`find_period`."""

    period: float
    spread: float  # SD of the linked gaps divided by their multiples
    p_value: float  # before the correction for the number of occurrence sets
    members: np.ndarray  # indices of the onsets linked to or from
    links: int
    tolerance: float  # seconds a gap may be off a multiple of the period


def segments_of(spans: Sequence[Span]) -> list[Span]:
    """One (t_start, t_end, setup, level, rep) per (setup, level, rep): its phases merged into
    the span from the first start to the last end, in time order."""
    merged: dict[tuple[str, float | None, int | None], list[float]] = {}
    for t0, t1, setup, level, rep in spans:
        key = (setup, level, rep)
        if key in merged:
            merged[key][0] = min(merged[key][0], t0)
            merged[key][1] = max(merged[key][1], t1)
        else:
            merged[key] = [t0, t1]
    return sorted((a, b, *key) for key, (a, b) in merged.items())


def find_period(
    onsets: np.ndarray,
    segment: np.ndarray,
    bounds: dict[int, tuple[float, float]],
    tol_abs: float,
    min_period: float,
) -> Period | None:
    """The most significant period of ``onsets`` (sorted), gaps counted within a segment only.

    ``bounds`` gives each segment's (start, end), for its rate and for the multiples of the
    period that fit in it. The p-value is corrected for the candidate periods and tolerances
    only, the caller judges it; None when fewer than ``MIN_LINKS`` occurrences are linked or the
    linked gaps are no sharper than a uniform spread (see the module docstring).
    """
    found = [
        f
        for rel in REL_TOLS
        if (f := _find_period(onsets, segment, bounds, tol_abs, min_period, rel)) is not None
    ]
    if not found:
        return None
    best = min(found, key=lambda f: f.p_value)
    return replace(best, p_value=min(1.0, best.p_value * len(REL_TOLS)))


def _find_period(
    onsets: np.ndarray,
    segment: np.ndarray,
    bounds: dict[int, tuple[float, float]],
    tol_abs: float,
    min_period: float,
    rel: float,
) -> Period | None:
    t = np.asarray(onsets, dtype=float)
    seg = np.asarray(segment)
    if t.size < MIN_LINKS + 1:
        return None
    # resolved to a tenth at least (which also keeps the multiples' windows apart)
    min_period = max(min_period, tol_abs / MAX_REL_TOL)
    gaps = []
    for lag in (1, 2, 3):
        same = seg[lag:] == seg[:-lag]
        d = (t[lag:] - t[:-lag])[same]
        gaps.extend(d / m for m in range(1, MAX_MULTIPLE + 1))
    cand = np.sort(np.concatenate(gaps)) if gaps else np.array([])
    cand = cand[cand >= min_period]
    if cand.size == 0:
        return None
    # distinct candidates: clusters of values within half a tolerance of the cluster's first
    reps: list[float] = []
    cluster: list[float] = []
    for p in cand.tolist():
        if cluster and p - cluster[0] > 0.5 * _tol(cluster[0], tol_abs, rel):
            reps.append(float(np.median(cluster)))
            cluster = []
        cluster.append(p)
    reps.append(float(np.median(cluster)))
    rate = np.array(
        [np.count_nonzero(seg == s) / max(bounds[s][1] - bounds[s][0], 1e-9) for s in seg]
    )
    seg_end = np.array([bounds[s][1] for s in seg.tolist()])
    scored = [(_p_value(t, seg, rate, seg_end, p, tol_abs, rel)[0], -p) for p in reps]
    period = -min(scored)[1]
    for _ in range(3):
        src, dst, mult = _links(t, seg, period, _tol(period, tol_abs, rel))
        if src.size == 0:
            return None
        # the longest period every link fits: when all gaps are multiples of 2P or 3P, the
        # occurrences in between were never seen and P would claim them
        k = next((k for k in (3, 2) if np.all(mult % k == 0)), 1)
        # least squares over the links: sum of gaps / sum of multiples
        period = float(k * (t[dst] - t[src]).sum() / mult.sum())
    p_value, links, members = _p_value(t, seg, rate, seg_end, period, tol_abs, rel)
    p_value = min(1.0, p_value * len(reps))
    if links < MIN_LINKS:
        return None
    tol = _tol(period, tol_abs, rel)
    src, dst, mult = _links(t, seg, period, tol)
    gaps = t[dst] - t[src]
    # Sharper than the tolerance: a smooth spread of gaps (quasi-regular episodes of a busy
    # tier, whose gaps cluster around a typical value) puts the linked ones anywhere in
    # +-tol, a schedule near its centre. One-sided test of the mean |deviation| / tol against
    # the uniform's 1/2 (sd 1/sqrt(12 k)).
    off = np.abs(gaps - mult * period) / tol
    z = (0.5 - float(off.mean())) * np.sqrt(12.0 * off.size)
    if z < SHARP_Z:
        return None
    return Period(period, float(np.std(gaps / mult)), p_value, members, links, tol)


def _tol(period: float, tol_abs: float, rel: float) -> float:
    return max(tol_abs, rel * period)


def _links(
    t: np.ndarray, seg: np.ndarray, period: float, tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(from, to, multiple) of the links: each occurrence to the first later one of its segment
    within ``tol`` of a multiple 1..MAX_MULTIPLE of ``period`` (tol < period / 2, so the
    windows of the multiples do not overlap)."""
    n = t.size
    target = np.full(n, -1)
    multiple = np.zeros(n)
    for m in range(1, MAX_MULTIPLE + 1):
        lo = np.searchsorted(t, t + m * period - tol, side="left")
        hi = np.searchsorted(t, t + m * period + tol, side="right")
        hit = (lo < hi) & (target < 0)
        hit[hit] &= seg[lo[hit]] == seg[hit]
        target[hit] = lo[hit]
        multiple[hit] = m
    src = np.flatnonzero(target >= 0)
    return src, target[src], multiple[src]


def _p_value(
    t: np.ndarray,
    seg: np.ndarray,
    rate: np.ndarray,
    seg_end: np.ndarray,
    period: float,
    tol_abs: float,
    rel: float,
) -> tuple[float, int, np.ndarray]:
    """(tail probability of the number of linked occurrences under random onsets, that number,
    the occurrences linked to or from)."""
    tol = _tol(period, tol_abs, rel)
    src, dst, _ = _links(t, seg, period, tol)
    k = int(src.size)
    fit = np.clip(np.floor((seg_end - t + tol) / period), 0, MAX_MULTIPLE)
    chance = 1.0 - np.exp(-2.0 * tol * rate * fit)
    mean = float(chance.mean())
    members = np.union1d(src, dst)
    # Hoeffding: a sum of independent Bernoulli(p_i) reaches c >= n p + 1 no more often than
    # a binomial of the same mean does
    if k == 0 or k < t.size * mean + 1:
        return 1.0, k, members
    return float(binom.sf(k - 1, t.size, mean)), k, members


def _occurrences(
    episodes: Sequence[dict[str, Any]], segments: Sequence[Span], early_s: float
) -> list[Occurrence]:
    found: dict[tuple[int, str], Occurrence] = {}
    for i, ep in enumerate(episodes):
        key = (int(ep.get("incident", i)), str(ep["root_tier"]))
        occ = found.get(key)
        if occ is None:
            occ = found[key] = Occurrence(key[1], ep["kind"], ep["start"], ep["end"], [])
        occ.episodes.append(i)
        occ.onset = min(occ.onset, ep["start"])
        occ.end = max(occ.end, ep["end"])
    for occ in found.values():
        # a stall if the root was paused as the occurrence began (not when a later stall fell
        # inside a long saturation)
        paused = [
            episodes[i]["paused"]
            for i in occ.episodes
            if episodes[i].get("paused")
            and episodes[i]["paused"]["tier"] == occ.root
            and episodes[i]["start"] <= occ.onset + early_s
        ]
        if paused:  # the moment the root froze is the sharpest onset there is
            first = min(paused, key=lambda p: p["start"])
            occ.onset = first["start"]
            occ.pause = first["end"] - first["start"]
            occ.end = max(occ.end, first["end"])
    # one event seen as incidents of both kinds (a stall's short burst and the long episode it
    # set off): the same root, the same onset
    out: list[Occurrence] = []
    for occ in sorted(found.values(), key=lambda o: (o.root, o.onset)):
        prev = out[-1] if out else None
        if prev is not None and prev.root == occ.root and occ.onset - prev.onset <= early_s:
            if occ.duration > prev.duration:
                prev.kind = occ.kind
            prev.episodes += occ.episodes
            prev.end = max(prev.end, occ.end)
            prev.pause = prev.pause if prev.pause is not None else occ.pause
        else:
            out.append(occ)
    out.sort(key=lambda o: (o.onset, o.root))
    starts = np.array([s[0] for s in segments])
    for occ in out:
        j = int(np.searchsorted(starts, occ.onset, side="right")) - 1
        # outside every window: the stretch after window j (-1: before the first)
        occ.segment = j if j >= 0 and occ.onset < segments[j][1] else -(j + 2)
    return out


def _bounds(occs: Sequence[Occurrence], segments: Sequence[Span]) -> dict[int, tuple[float, float]]:
    """(start, end) of every segment index in use; a stretch outside the windows spans the time
    between its neighbours (or its occurrences)."""
    out: dict[int, tuple[float, float]] = {}
    for s in {o.segment for o in occs}:
        if s >= 0:
            out[s] = (segments[s][0], segments[s][1])
            continue
        before = -s - 2  # the window before this stretch, -1 if none
        inside = [o for o in occs if o.segment == s]
        a = segments[before][1] if before >= 0 else min(o.onset for o in inside)
        b = segments[before + 1][0] if before + 1 < len(segments) else max(o.end for o in inside)
        out[s] = (a, max(b, a + 1e-9))
    return out


def group_episodes(
    episodes: Sequence[dict[str, Any]],
    tiers: Sequence[str],
    spans: Sequence[Span],
    window_s: float,
    front: tuple[np.ndarray, np.ndarray] | None = None,
    vlrt_s: float = 1.0,
    bottlenecks: Mapping[tuple[str, float], tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Groups of ``episodes`` (the final, sorted list: groups refer to it by index), periodic
    trains first, then saturation intervals, then one-offs.

    ``spans`` are the run's (setup, level, rep) windows or their phases (``spans_of``);
    ``front`` the (start, end) of the end-to-end requests, for the VLRT counts;
    ``bottlenecks`` maps (setup, level) to the (tier, resource) the bottleneck analysis found
    saturated there (its primary).
    """
    if not episodes:
        return []
    segments = segments_of(spans)
    tol_abs = 2.0 * window_s
    occs = _occurrences(episodes, segments, tol_abs)
    bounds = _bounds(occs, segments)
    groups: list[dict[str, Any]] = []
    for root in sorted({o.root for o in occs}, key=lambda r: (_depth(r, tiers), r)):
        rest = [o for o in occs if o.root == root]
        while True:
            train = _train(rest, bounds, tol_abs)
            if train is None:
                break
            members, found, p_value = train
            groups.append(
                {
                    "kind": "periodic",
                    "occurrences": members,
                    "period_s": found.period,
                    "period_spread_s": found.spread,
                    "p_value": p_value,
                }
            )
            taken = {id(o) for o in members}
            rest = [o for o in rest if id(o) not in taken]
        flagged = {
            j: hit[1]
            for j, (_, _, setup, level, _) in enumerate(segments)
            if level is not None
            and (hit := (bottlenecks or {}).get((setup, float(level)))) is not None
            and hit[0] == root
        }
        rest = _saturation_groups(rest, segments, groups, flagged)
        # stalls apart from queue build-ups: different mechanisms, likely different causes
        for kind, stall in sorted({(o.kind, o.pause is not None) for o in rest}):
            same = [o for o in rest if o.kind == kind and (o.pause is not None) == stall]
            groups.append({"kind": "one-off", "occurrences": same})
    out = [_describe(g, episodes, tiers, bounds, front, vlrt_s) for g in groups]
    out.sort(key=lambda g: (_KIND_ORDER[g["kind"]], -g["count"], g["first"]))
    return out


def bottleneck_levels(
    bottlenecks: Sequence[dict[str, Any]],
) -> dict[tuple[str, float], tuple[str, str]]:
    """(setup, level) -> (tier, resource) of the primary bottleneck of the bottleneck analysis's
    levels (the ``bottlenecks`` section), where it found one in the system."""
    return {
        (str(b["setup"]), float(b["level"])): (b["primary"]["tier"], b["primary"]["resource"])
        for b in bottlenecks
        if b.get("primary") and b.get("level") is not None and b["kind"] not in ("none", "client")
    }


def _train(
    occs: list[Occurrence], bounds: dict[int, tuple[float, float]], tol_abs: float
) -> tuple[list[Occurrence], Period, float] | None:
    """The most significant periodic train among ``occs`` (sorted by onset), tested among all
    of them and among the stalls alone; None if there is none."""
    sets = [occs]
    stalls = [o for o in occs if o.pause is not None]
    if MIN_LINKS + 1 <= len(stalls) < len(occs):
        sets.append(stalls)
    best: tuple[float, list[Occurrence], Period] | None = None
    for subset in sets:
        if len(subset) < MIN_LINKS + 1:
            continue
        t = np.array([o.onset for o in subset])
        seg = np.array([o.segment for o in subset])
        # occurrences of one cause do not overlap: the period exceeds their typical duration
        typical = float(np.median([o.duration for o in subset]))
        found = find_period(t, seg, bounds, tol_abs, 2.0 * typical)
        if found is None:
            continue
        p_value = min(1.0, found.p_value * len(sets))
        if p_value < ALPHA and (best is None or p_value < best[0]):
            best = (p_value, subset, found)
    if best is None:
        return None
    p_value, subset, found = best
    members = [subset[i] for i in found.members.tolist()]
    # the root's other occurrences on the train's lattice, in the windows where it was seen
    tol = found.tolerance
    taken = {id(o) for o in members}
    for s in {o.segment for o in members}:
        phases = np.array([o.onset for o in members if o.segment == s])
        for o in occs:
            if o.segment != s or id(o) in taken:
                continue
            off = (o.onset - phases) / found.period
            if np.any(np.abs(off - np.round(off)) * found.period <= tol):
                members.append(o)
                taken.add(id(o))
    return sorted(members, key=lambda o: o.onset), found, p_value


def _depth(tier: str, tiers: Sequence[str]) -> int:
    return tiers.index(tier) if tier in tiers else len(tiers)


def _saturation_groups(
    occs: list[Occurrence],
    segments: Sequence[Span],
    groups: list[dict[str, Any]],
    flagged: Mapping[int, str],
) -> list[Occurrence]:
    """Append the saturation intervals of one root's occurrences to ``groups``; the rest.

    ``flagged`` maps the windows in which the bottleneck analysis found the root saturated to
    the resource: runs of such windows (the same or the next window of a setup) are intervals
    of their own, with the root's non-stall occurrences in them.
    """
    taken: set[int] = set()
    runs: list[list[int]] = []
    for j in sorted(flagged):
        if runs and _same_or_next(runs[-1][-1], j, segments):
            runs[-1].append(j)
        else:
            runs.append([j])
    for run in runs:
        inside = [o for o in occs if o.segment in run and o.pause is None]
        if inside:
            taken |= {id(o) for o in inside}
            resource = Counter(flagged[j] for j in run).most_common(1)[0][0]
            groups.append({"kind": "saturation", "occurrences": inside, "resource": resource})
    occs = [o for o in occs if id(o) not in taken]
    sweep = len(segments) > 1
    long = [o for o in occs if o.kind == "saturation" and o.pause is None]
    intervals: list[list[Occurrence]] = []
    for occ in long:
        if intervals:
            prev = intervals[-1][-1]
            near = occ.onset - prev.end <= max(prev.duration, occ.duration)
            if near or (sweep and _same_or_next(prev.segment, occ.segment, segments)):
                intervals[-1].append(occ)
                continue
        intervals.append([occ])
    taken = {id(o) for o in long}
    for interval in intervals:
        windows = {o.segment for o in interval if o.segment >= 0} if sweep else set()
        a, b = interval[0].onset, max(o.end for o in interval)
        inside = [
            o
            for o in occs
            if id(o) not in taken and o.pause is None and (o.segment in windows or a <= o.onset < b)
        ]
        taken |= {id(o) for o in inside}
        groups.append({"kind": "saturation", "occurrences": [*interval, *inside]})
    return [o for o in occs if id(o) not in taken]


def _same_or_next(a: int, b: int, segments: Sequence[Span]) -> bool:
    """Whether window ``b`` is ``a`` or the next window of the same setup after it."""
    if a < 0 or b < 0:
        return False
    if a == b:
        return True
    later = [j for j in range(a + 1, len(segments)) if segments[j][2] == segments[a][2]]
    return bool(later) and later[0] == b


def _describe(
    group: dict[str, Any],
    episodes: Sequence[dict[str, Any]],
    tiers: Sequence[str],
    bounds: dict[int, tuple[float, float]],
    front: tuple[np.ndarray, np.ndarray] | None,
    vlrt_s: float,
) -> dict[str, Any]:
    occs: list[Occurrence] = sorted(group["occurrences"], key=lambda o: o.onset)
    idx = sorted(i for o in occs for i in o.episodes)
    eps = [episodes[i] for i in idx]
    root = occs[0].root
    seen = sorted({e["tier"] for e in eps}, key=lambda t: (_depth(t, tiers), t))
    pauses = [o.pause for o in occs if o.pause is not None]
    # the root's own resource; a paused root may have no episode of its own
    own = [e["resource"] for e in eps if e["tier"] == root]
    if group.get("resource"):  # named by the bottleneck analysis
        resource = group["resource"]
    elif own:
        resource = sorted(Counter(own).items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    else:
        resource = "pause" if len(pauses) * 2 > len(occs) else "queue"
    first, last = occs[0].onset, max(o.end for o in occs)
    busy = _union(sorted((o.onset, o.end) for o in occs))
    # the share of the time of its windows (or of its own span, in a single trace)
    inside = 0.0
    span = 0.0
    for s in sorted({o.segment for o in occs}):
        a, b = bounds[s]
        span += b - a
        inside += _union(sorted((max(o.onset, a), min(o.end, b)) for o in occs if o.segment == s))
    doc: dict[str, Any] = {
        "kind": group["kind"],
        "root_tier": root,
        "resource": resource,
        "tiers": seen,
        "count": len(occs),
        "stalls": len(pauses),
        "period_s": group.get("period_s"),
        "period_spread_s": group.get("period_spread_s"),
        "p_value": group.get("p_value"),
        "typical_duration_s": float(np.median([o.duration for o in occs])),
        "typical_pause_s": float(np.median(pauses)) if pauses else None,
        "total_duration_s": busy,
        "busy_fraction": min(1.0, inside / span) if span > 0 else None,
        "first": first,
        "last": last,
        "setups": sorted({e["setup"] for e in eps if e.get("setup") is not None}),
        "levels": sorted({float(e["level"]) for e in eps if e.get("level") is not None}),
        "vlrt_requests": _vlrt(front, eps, vlrt_s),
        "episodes": idx,
    }
    doc["summary"] = _summary(doc, occs[0].kind)
    return doc


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -np.inf
    for a, b in intervals:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return float(total)


def _vlrt(
    front: tuple[np.ndarray, np.ndarray] | None, eps: Sequence[dict[str, Any]], vlrt_s: float
) -> int:
    """End-to-end requests of at least ``vlrt_s`` whose lifetime overlaps one of ``eps``."""
    if front is None or not eps:
        return 0
    s = np.asarray(front[0], dtype=float)
    e = np.asarray(front[1], dtype=float)
    keep = np.isfinite(s) & np.isfinite(e) & (e - s >= vlrt_s)
    s, e = s[keep], e[keep]
    return int(overlapping(s, e, [(ep["start"], ep["end"]) for ep in eps]).sum())


def _where(setups: list[str], levels: list[float]) -> str:
    if not levels:
        return f" in {', '.join(setups)}" if len(setups) > 1 else ""
    head = f"{setups[0]} " if len(setups) == 1 else ""
    if len(levels) == 1:
        return f" at {head}level {levels[0]:g}"
    if len(levels) <= 3:
        return f" at {head}levels {', '.join(f'{lv:g}' for lv in levels)}"
    return f" at {head}levels {levels[0]:g}-{levels[-1]:g}"


def _summary(g: dict[str, Any], kind: str) -> str:
    """One line: what happened, how often, how long, where it started, what it cost."""
    n = g["count"]
    where = _where(g["setups"], g["levels"])
    others = [t for t in g["tiers"] if t != g["root_tier"]]
    seen = f", seen in {', '.join(others)}" if others else ""
    vlrt = f"; {g['vlrt_requests']} VLRT requests" if g["vlrt_requests"] else ""
    s = "s" if n != 1 else ""
    if g["kind"] == "saturation":
        frac = g["busy_fraction"]
        share = f" ({frac:.0%} of that time)" if frac is not None else ""
        k = len(g["episodes"])
        return (
            f"{g['root_tier']} {g['resource']} saturated{where}: {k} episode"
            f"{'s' if k != 1 else ''}, {g['total_duration_s']:.1f} s in all{share}{seen}{vlrt}"
        )
    stalls = g["stalls"] * 2 > n
    noun = "stall" if stalls else kind
    length = g["typical_pause_s"] if stalls else g["typical_duration_s"]
    if g["kind"] == "periodic":
        return (
            f"a train of {n} {noun}{s} of ~{length:.2g} s every {g['period_s']:.2f} s, "
            f"rooted at {g['root_tier']}{where}{seen}{vlrt}"
        )
    head = f"{n} sporadic {noun}{s}" if n > 1 else f"one {noun}"
    return f"{head} of ~{length:.2g} s rooted at {g['root_tier']}{where}{seen}{vlrt}"
