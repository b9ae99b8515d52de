"""Millibottlenecks: sub-second saturations found in 50 ms windows, their root tier, and the very
long requests they explain (seed 003; seed 001 ch. IV; Wang et al., ICDCS 2013).

Method, per tier (the ``client`` tier is the end-to-end view and is not a tier here):

1. From the request records, in windows of ``mb_window_s``: the time-average and maximum number
   of requests in the tier (an exact event sweep: +1 at ``start``, -1 at ``end``, a departure
   before an arrival at the same instant), the throughput (completions per second) and the
   point-in-time response time (mean, max and p99 of the requests completing in the window,
   i.e. with floor(end / width) = k; times rounded to the nearest µs; the p99 is the smallest
   value at or above the 99th percentile, numpy's method "higher"). The sweep is native code.
2. Saturation load q* from the (queue, throughput) scatter: windows sorted by queue into
   equal-count bins; the capacity C is the largest bin mean throughput and q* the mean queue of
   the first bin reaching 95 % of it. Beyond q* more requests in the tier bring no more
   throughput: a window with mean queue > q* is a bottleneck window.
3. Episodes: maximal runs of bottleneck windows (gaps up to ``merge_gap_s`` bridged). A run is
   kept when it delays requests: the largest point-in-time mean response time of the tier
   while it lasts (and two windows after) reaches both ``rt_factor`` times and ``min_delay_s``
   more than the tier's typical response time (10th percentile of its window means); random
   queueing at moderate load never gets there. The episode spans the windows around the peak
   whose excess queue (over q*) is at least ``core_fraction`` of the peak's, and starts when
   the queue began its rise (the first arrival or departure after the last moment before the
   peak at which the exact queue was no longer than its median of the second before).
   Shorter than ``millibottleneck_max_s``: ``millibottleneck``, else ``saturation``.
4. Cross-check: the tier's resource metrics in the same interval; the resource saturated in most
   of it (``resources.SIGNALS``) names the episode's resource, else ``queue``.
5. Root tier (push-back): overlapping episodes of one kind form an incident; the tier
   whose queue rose first is the root, ties (onsets within one window, or a tenth of the
   incident's shortest episode) going to the deepest tier (with
   nested records an upstream tier's count includes the requests it waits for downstream, so
   it rises at the same time as the culprit; with per-visit records the culprit rises first
   and the others follow).
6. VLRT requests (end-to-end response time >= ``vlrt_s``) are explained by the episodes whose
   interval they overlap.

Without request records, episodes are maximal runs of resource-saturated metric samples (score
>= 1, see ``resources``), gaps up to ``merge_gap_s`` (or three sampling intervals) bridged.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tierscope import _native
from tierscope.analysis.resources import resource_scores
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.graph import Graph

#: Prefix of a caller's metric of its calls outstanding to one callee (``calls_out:<callee>``).
CALLS_OUT = "calls_out:"
#: Resources whose saturation is a cause of its own, never push-back.
_HARDWARE = ("cpu", "disk")

__all__ = [
    "TierWindows",
    "Timeline",
    "assign_roots",
    "cross_check",
    "detect_episodes",
    "metric_episodes",
    "overlapping",
    "place",
    "push_back_roots",
    "saturation_load",
    "spans_of",
    "tier_windows",
    "timeline",
    "vlrt_links",
]

CLIENT = "client"
#: Fraction of the capacity that marks the first saturated queue bin.
_CAPACITY_FRACTION = 0.95
_MIN_BIN = 20
_MAX_BINS = 40


@dataclass(frozen=True)
class TierWindows:
    """Per-window series of one tier on the grid t0 + k x width, k = 0..n-1."""

    tier: str
    q_mean: np.ndarray
    q_max: np.ndarray
    completions: np.ndarray
    rt_mean: np.ndarray
    rt_max: np.ndarray
    rt_p99: np.ndarray
    starts: np.ndarray  # sorted arrival times, on the run's time base
    ends: np.ndarray  # sorted departure times (inf: never left)

    def queue_at(self, t: float) -> int:
        """Requests in the tier just after time ``t``."""
        return int(
            np.searchsorted(self.starts, t, side="right")
            - np.searchsorted(self.ends, t, side="right")
        )

    def rise_start(self, level: float, t_from: float, t_to: float) -> float:
        """Where the rise to a peak at ``t_to`` began: the first event after the last one in
        (t_from, t_to] that left at most ``level`` requests in the tier (t_from if none did)."""
        a = np.searchsorted(self.starts, t_from, side="right")
        b = np.searchsorted(self.starts, t_to, side="right")
        c = np.searchsorted(self.ends, t_from, side="right")
        d = np.searchsorted(self.ends, t_to, side="right")
        times = np.concatenate((self.ends[c:d], self.starts[a:b]))
        steps = np.concatenate((-np.ones(d - c), np.ones(b - a)))
        order = np.argsort(times, kind="stable")  # departures first at equal times
        q = self.queue_at(t_from) + np.cumsum(steps[order])
        low = np.flatnonzero(q <= level)
        if not low.size:
            return t_from
        rise = min(int(low[-1]) + 1, q.size - 1)  # the first event of the climb
        return float(times[order][rise])

    def throughput(self, width: float) -> np.ndarray:
        return self.completions / width


@dataclass(frozen=True)
class Timeline:
    """Windows of every tier on one grid."""

    t0: float
    width: float
    n: int
    tiers: dict[str, TierWindows]

    def times(self) -> np.ndarray:
        return self.t0 + self.width * np.arange(self.n)


def tier_windows(
    tier: str, start: np.ndarray, end: np.ndarray, t0: float, width: float, n: int
) -> TierWindows:
    """Queue, throughput and point-in-time response time of one tier's requests.

    ``start``/``end`` are request times on the run's time base; a request is in the tier on
    [start, end) and one without an end (NaN) stays to the end of the grid. numpy sorts the
    arrival times, the departure times and the response-time keys (window << 40 | µs, made by
    ``_native.rt_keys``); the native core (``_native.window_sweep``) makes one pass over them.
    """
    rel_start = np.ascontiguousarray(np.asarray(start, dtype=np.float64) - t0)
    rel_end = np.ascontiguousarray(np.asarray(end, dtype=np.float64) - t0)
    s = np.sort(rel_start)
    e = np.sort(rel_end)  # NaN (never left) sorts last: it becomes +inf
    if e.size and np.isnan(e[-1]):
        e[np.isnan(e)] = np.inf
    keys = np.frombuffer(_native.rt_keys(rel_start, rel_end, float(width), int(n)), np.uint64)
    keys = np.sort(keys)
    parts = _native.window_sweep(s, e, keys, float(width), int(n))
    q_mean, q_max, completions, rt_mean, rt_max, rt_p99 = (
        np.frombuffer(p, dtype=np.float64) for p in parts
    )
    return TierWindows(tier, q_mean, q_max, completions, rt_mean, rt_max, rt_p99, s + t0, e + t0)


def timeline(requests: pl.DataFrame, width: float) -> Timeline | None:
    """Windows of every tier of ``requests`` (``tier``, ``start``, ``end``), or None if empty."""
    if requests is None or requests.height == 0:
        return None
    req = requests.select("tier", pl.col("start").cast(pl.Float64), pl.col("end").cast(pl.Float64))
    bounds = req.select(pl.col("start").min().alias("a"), pl.col("end").max().alias("b"))
    a, b = bounds.row(0)
    if a is None:
        return None
    t0 = float(np.floor(a / width) * width)
    last = max(float(b if b is not None else a), float(a))
    n = int(np.floor((last - t0) / width)) + 1
    tiers = {}
    for tier in sorted(req["tier"].unique().drop_nulls().to_list()):
        frame = req.filter(pl.col("tier") == tier)
        tiers[str(tier)] = tier_windows(
            str(tier), frame["start"].to_numpy(), frame["end"].to_numpy(), t0, width, n
        )
    return Timeline(t0, width, n, tiers)


def saturation_load(q_mean: np.ndarray, throughput: np.ndarray) -> tuple[float, float] | None:
    """(q*, capacity) from the (queue, throughput) scatter of a tier's windows.

    Windows with any activity are sorted by queue into equal-count bins of at least 20; the
    capacity is the largest bin mean throughput and q* the mean queue of the first bin whose
    mean throughput reaches 95 % of it. None with fewer than 60 active windows.
    """
    active = (q_mean > 0) | (throughput > 0)
    q, x = q_mean[active], throughput[active]
    if q.size < 3 * _MIN_BIN:
        return None
    order = np.argsort(q, kind="stable")
    n_bins = min(_MAX_BINS, q.size // _MIN_BIN)
    bins = np.array_split(order, n_bins)
    qb = np.array([q[b].mean() for b in bins])
    xb = np.array([x[b].mean() for b in bins])
    capacity = float(xb.max())
    if capacity <= 0:
        return None
    first = int(np.flatnonzero(xb >= _CAPACITY_FRACTION * capacity)[0])
    return float(qb[first]), capacity


def _runs(flags: np.ndarray, bridge: int) -> list[tuple[int, int]]:
    """Maximal runs [a, b] (inclusive) of True, gaps of at most ``bridge`` False bridged."""
    idx = np.flatnonzero(flags)
    if idx.size == 0:
        return []
    cut = np.flatnonzero(np.diff(idx) > bridge + 1)
    starts = np.concatenate(([idx[0]], idx[cut + 1]))
    ends = np.concatenate((idx[cut], [idx[-1]]))
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def detect_episodes(
    tl: Timeline, tiers: Sequence[str], options: AnalysisOptions
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(episodes, tier loads) from a timeline; episodes lack root tier and cross-checks yet."""
    w = tl.width
    bridge = round(options.merge_gap_s / w)
    episodes: list[dict[str, Any]] = []
    loads: list[dict[str, Any]] = []
    for tier in tiers:
        if tier not in tl.tiers or tier == CLIENT:
            continue
        tw = tl.tiers[tier]
        x = tw.throughput(w)
        found = saturation_load(tw.q_mean, x)
        if found is None:
            loads.append(
                {
                    "tier": tier,
                    "saturation_load": None,
                    "capacity": None,
                    "windows": tl.n,
                    "bottleneck_windows": 0,
                }
            )
            continue
        q_star, cap = found
        flags = tw.q_mean > q_star
        loads.append(
            {
                "tier": tier,
                "saturation_load": q_star,
                "capacity": cap,
                "windows": tl.n,
                "bottleneck_windows": int(flags.sum()),
            }
        )
        typical = _typical_rt(tw.rt_mean)
        for a, b in _runs(flags, bridge):
            seg = tw.q_mean[a : b + 1]
            peak = a + int(np.argmax(seg))
            excess = tw.q_mean[peak] - q_star
            # delay: the slowest point-in-time response time while the run lasts and as its
            # requests leave (two more windows), against the tier's typical response time
            late = tw.rt_mean[a : min(b + 3, tl.n)]
            slowest = float(np.nanmax(late)) if np.isfinite(late).any() else (b - a + 1) * w
            if slowest < max(typical + options.min_delay_s, options.rt_factor * typical):
                continue
            floor = q_star + options.core_fraction * excess
            lo = peak
            while lo > a and tw.q_mean[lo - 1] >= floor:
                lo -= 1
            hi = peak
            while hi < b and tw.q_mean[hi + 1] >= floor:
                hi += 1
            peak_queue = float(tw.q_max[lo : hi + 1].max())
            if peak_queue < options.min_peak_queue:
                continue
            start = _onset(tw, lo, peak, tl.t0, w)
            end = tl.t0 + (hi + 1) * w
            episodes.append(
                {
                    "tier": tier,
                    "node": None,
                    "resource": "queue",
                    "start": start,
                    "end": end,
                    "duration": end - start,
                    "kind": _kind(end - start, options),
                    "source": "requests",
                    "peak_queue": peak_queue,
                    "saturation_load": q_star,
                    "backlog_s": float(excess / cap),
                    "delay_s": slowest - typical,
                    "resource_confirmed": None,
                }
            )
    return episodes, loads


def _onset(tw: TierWindows, lo: int, peak: int, t0: float, w: float) -> float:
    """When the queue began to rise: the first event after the last moment before the peak at
    which it was no longer than its median of the second before (from the exact event sweep),
    at most one second before the first episode window."""
    first = t0 + lo * w
    before = round(1.0 / w)
    base = float(np.median(tw.q_mean[max(0, lo - before) : lo])) if lo > 0 else 0.0
    peak_t = t0 + (peak + 1) * w
    return min(first, tw.rise_start(base, max(t0, first - 1.0), peak_t))


def _typical_rt(rt_mean: np.ndarray) -> float:
    """The tier's unloaded response time: the 10th percentile of its window means."""
    done = rt_mean[np.isfinite(rt_mean)]
    return float(np.percentile(done, 10)) if done.size else 0.0


def _kind(duration: float, options: AnalysisOptions) -> str:
    return "millibottleneck" if duration < options.millibottleneck_max_s else "saturation"


def metric_episodes(metrics: pl.DataFrame, options: AnalysisOptions) -> list[dict[str, Any]]:
    """Episodes from resource metrics alone: runs of saturated samples per (tier, node, resource).

    A sample at time t describes [t, t + dt) with dt the series' median sampling interval;
    a run ends at an unsaturated sample or at a gap longer than max(merge_gap_s, 3 dt); runs
    separated by at most ``merge_gap_s`` of unsaturated samples are merged.
    """
    samples = resource_scores(metrics, options)
    out = []
    for (tier, node, resource), frame in samples.group_by(
        "tier", "node", "resource", maintain_order=True
    ):
        if tier == CLIENT:
            continue
        t = frame["t"].to_numpy()
        sat = frame["score"].to_numpy() >= 1.0 - 1e-12
        if not sat.any():
            continue
        dt = float(np.median(np.diff(t))) if t.size > 1 else options.mb_window_s
        gap_break = max(options.merge_gap_s, 3 * dt)
        runs: list[list[float]] = []  # [first saturated t, last saturated t]
        interrupted = False  # an unsaturated sample since the run's last saturated one
        for ti, si in zip(t.tolist(), sat.tolist(), strict=True):
            if not si:
                interrupted = True
                continue
            if runs:
                idle = ti - runs[-1][1] - dt  # unsaturated time since the run's last sample
                limit = options.merge_gap_s if interrupted else gap_break - dt
                if idle <= limit + 1e-9:
                    runs[-1][1] = ti
                    interrupted = False
                    continue
            runs.append([ti, ti])
            interrupted = False
        for a, b in runs:
            start, end = a, b + dt
            out.append(
                {
                    "tier": str(tier),
                    "node": str(node),
                    "resource": str(resource),
                    "start": float(start),
                    "end": float(end),
                    "duration": float(end - start),
                    "kind": _kind(end - start, options),
                    "source": "metrics",
                    "peak_queue": None,
                    "saturation_load": None,
                    "backlog_s": None,
                    "delay_s": None,
                    "resource_confirmed": True,
                }
            )
    return out


def cross_check(
    episodes: list[dict[str, Any]], metrics: pl.DataFrame | None, options: AnalysisOptions
) -> None:
    """Name each request episode's resource from the tier's resource metrics in its interval."""
    if not episodes or metrics is None or metrics.height == 0:
        return
    samples = resource_scores(metrics, options)
    if samples.height == 0:
        return
    by_tier = {str(k[0]): f for k, f in samples.partition_by("tier", as_dict=True).items()}
    for ep in episodes:
        frame = by_tier.get(ep["tier"])
        if frame is None:
            continue
        inside = frame.filter((pl.col("t") >= ep["start"]) & (pl.col("t") < ep["end"]))
        if inside.height == 0:
            ep["resource_confirmed"] = False
            continue
        frac = (
            inside.group_by("node", "resource")
            .agg((pl.col("score") >= 1.0 - 1e-12).mean().alias("f"))
            .sort("f", "node", "resource", descending=[True, False, False])
        )
        node, resource, f = frac.row(0)
        if f >= 0.5:
            ep["resource"], ep["node"], ep["resource_confirmed"] = str(resource), str(node), True
        else:
            ep["resource_confirmed"] = False


#: Per-window counts or rates of requests accepted and completed by a tier: the runner's
#: gauges (per second) and the simulator's counts (per window); only zero or not matters here.
_ACCEPTED = ("arrivals_s", "arrivals")
_COMPLETED = ("throughput_s", "completions")


def frozen_stretches(
    metrics: pl.DataFrame | None,
    tiers: Sequence[str],
    nested: bool = True,
    front: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[tuple[float, float]]]:
    """tier -> (start, end) stretches in which a tier was frozen, after having been active
    within the second before: it completed no request (on every node) and

    * ``nested`` (measured systems, where a tier's request lasts until the tiers behind it have
      answered): it accepted none either, while requests waited in the tier in front of it
      (its ``queue_length``; the client's ``outstanding`` for the first tier), so that a tier
      merely idle at light load does not count. A paused process (a stall, a long GC, a
      descheduled VM) stops counting altogether.
    * not ``nested`` (simulated stations, which complete their own service only): it had
      requests waiting or arriving. Only a stalled station is stuck with work; the others are
      busy, or idle for lack of input.

    The tiers in front of a tier are its callers in ``front`` (the run's call graph; the
    client in front of the entry), else the tier before it in ``tiers``; what waits there for
    the tier is their calls outstanding to it (``calls_out:<tier>``, where every caller
    publishes them) beyond those inside it (its own ``queue_length``: a tier that merely waits
    for its own callee holds every call made to it), else their queues. Nor is a tier frozen
    while the tiers behind it (its callees) hold requests (their ``queue_length``): it waits
    for them. (At light load the entry, every user's request inside it, accepts nothing while
    its callee's callee is paused: it waits, it is not paused; a paused tier's callees finish
    what they were given and fall idle.)
    """
    out: dict[str, list[tuple[float, float]]] = {}
    if metrics is None or metrics.height == 0:
        return out
    wanted = (*_ACCEPTED, *_COMPLETED, "queue_length", "outstanding")
    calls = pl.col("metric").str.starts_with(CALLS_OUT)
    sums = (
        metrics.filter(
            pl.col("tier").is_in([*tiers, CLIENT]) & (pl.col("metric").is_in(wanted) | calls)
        )
        .with_columns(
            pl.when(pl.col("metric").is_in(_ACCEPTED))
            .then(pl.lit("accepted"))
            .when(pl.col("metric").is_in(_COMPLETED))
            .then(pl.lit("completed"))
            .when(calls)
            .then(pl.col("metric"))  # calls_out:<callee>
            .otherwise(pl.lit("queue"))  # queue_length of a tier, outstanding of the client
            .alias("what")
        )
        .group_by("tier", "t", "what")
        .agg(pl.col("value").fill_nan(0.0).sum())
    )
    series: dict[str, pl.DataFrame] = {
        tier: sums.filter(pl.col("tier") == tier)
        .pivot("what", index="t", values="value")
        .sort("t")
        .fill_null(0.0)
        for tier in [CLIENT, *tiers]
    }

    def column(tier: str, name: str, at: np.ndarray | None = None) -> np.ndarray | None:
        wide = series.get(tier)
        if wide is None or name not in wide.columns or wide.height == 0:
            return None
        values = wide[name].to_numpy()
        if at is None:
            return values
        i = np.searchsorted(wide["t"].to_numpy(), at, side="right") - 1  # last sample at or before
        return np.where(i >= 0, values[np.clip(i, 0, None)], 0.0)

    for k, tier in enumerate(tiers):
        wide = series[tier]
        if "completed" not in wide.columns or wide.height < 3:
            continue
        t = wide["t"].to_numpy()
        zeros = np.zeros(len(t))
        done = column(tier, "completed")
        accepted = column(tier, "accepted")
        accepted = zeros if accepted is None else accepted
        queue = column(tier, "queue")
        queue = zeros if queue is None else queue
        if nested:
            # accepting nothing while requests wait in front of it (else it is merely idle)
            callers = (front or {}).get(tier) or [tiers[k - 1] if k and front is None else CLIENT]
            # what waits for this tier: its callers' calls to it where they publish them (a
            # caller of several callees queues for all of them), else their queues
            calls = [q for c in callers if (q := column(c, CALLS_OUT + tier, t)) is not None]
            if calls and len(calls) == len(callers):
                # calls it has not taken in: a tier that merely waits for its own callee
                # holds every call made to it (and accepts none when no new one comes),
                # a paused one counts none of those made since it froze
                waiting = np.sum(calls, axis=0) - queue > 0.5
            else:
                queues = [q for c in callers if (q := column(c, "queue", t)) is not None]
                waiting = np.sum(queues, axis=0) > 0 if queues else True
            behind = [
                q
                for c in (
                    [d for d in tiers if tier in (front.get(d) or ())]
                    if front is not None
                    else tiers[k + 1 : k + 2]
                )
                if (q := column(c, "queue", t)) is not None
            ]
            held = np.sum(behind, axis=0) > 0.5 if behind else False
            frozen = (done <= 0) & (accepted <= 0) & waiting & ~np.asarray(held)
        else:
            frozen = (done <= 0) & ((accepted > 0) | (queue > 0))
        busy = ~frozen
        stretches = []
        for a, b in _runs(frozen, 0):
            active_before = busy[max(0, np.searchsorted(t, t[a] - 1.0)) : a].any()
            if a > 0 and active_before:
                # a sample at t describes [t - interval, t): the stretch began one sample earlier
                stretches.append((float(t[a - 1]), float(t[b])))
        out[tier] = stretches
    return out


def assign_roots(
    episodes: list[dict[str, Any]],
    tiers: Sequence[str],
    tie_s: float,
    frozen: dict[str, list[tuple[float, float]]] | None = None,
    min_frozen_s: float = 0.1,
    graph: Graph | None = None,
) -> None:
    """Group overlapping episodes of the same kind into incidents and name each one's root.

    Kinds are kept apart so that a sub-second stall inside a long saturation of another tier
    is its own incident (it has its own cause) rather than a part of the saturation.

    The root is the deepest tier among the first to rise (push-back: every tier in front of the
    culprit fills up at once). A paused tier cannot record the requests waiting for it, so its
    own queue rises only after it resumes; when ``frozen`` (from :func:`frozen_stretches`) shows
    a tier that accepted and completed nothing for ``min_frozen_s`` or more at an episode's
    start (or until two windows before it: the episode is then the burst of requests it held
    back) while the tiers in front of it kept accepting, that tier is the root.

    With the run's call graph (``graph``), an episode's root is sought among the incident's
    episodes in the components related to its own by calls: those it calls, directly or not
    (push-back travels from callees to callers), and those that call it (a caller's burst
    after it cleared). Two siblings that fill up at once (the catalogue and the orders service
    of one gateway) are two causes, not one. In a chain every tier is related to every other,
    as without a graph; tiers outside the graph (the client) are related to all.

    An episode whose root is another episode found paused-rooted shares that root: the burst
    a resumed tier releases (orders filling up when the catalogue's database, on the gateway's
    other branch, lets the requests it held go on) has the pause as its cause.
    """
    depth = {t: i for i, t in enumerate(tiers)}
    order = sorted(
        range(len(episodes)),
        key=lambda i: (episodes[i]["kind"], episodes[i]["start"], episodes[i]["end"]),
    )
    members: list[list[int]] = []
    reach = -np.inf
    kind = None
    for i in order:
        ep = episodes[i]
        if ep["kind"] != kind or ep["start"] > reach + 1e-9:
            members.append([])
            reach, kind = ep["end"], ep["kind"]
        else:
            reach = max(reach, ep["end"])
        members[-1].append(i)
    members.sort(key=lambda g: min(episodes[i]["start"] for i in g))
    for incident, group in enumerate(members):
        # onsets of a slow rise are known less precisely: ties within a tenth of the
        # incident's shortest episode too
        tie = max(tie_s, 0.1 * min(episodes[i]["duration"] for i in group))
        first_riser = _first_riser(episodes, group, tie, depth)
        source: dict[int, int] = {}  # episode -> the episode its root was taken from
        onset: list[str] = []
        by_onset = sorted(
            group, key=lambda i: (episodes[i]["start"], -depth.get(episodes[i]["tier"], -1))
        )
        for i in by_onset:
            if episodes[i]["tier"] not in onset:
                onset.append(episodes[i]["tier"])
        for i in group:
            tier = episodes[i]["tier"]
            # on a graph, only the episode's component, its callees (down to the leaves) and
            # its callers (the burst a paused caller releases) can be its cause; not siblings
            related = _related(graph, tier)
            # Judged per episode: a stall may begin inside another tier's ongoing episode (a
            # database saturating when the application server freezes) and is its own cause.
            # resumed within a sample and a window before: the burst of held-back requests
            paused = _paused_tier(
                {t: s for t, s in (frozen or {}).items() if related is None or t in related},
                tiers,
                episodes[i]["start"],
                min_frozen_s,
                2.0 * tie_s,
            )
            episodes[i]["incident"] = incident
            episodes[i]["onset_order"] = onset
            if paused:
                episodes[i]["root_tier"] = paused[0]
                episodes[i]["paused"] = {"tier": paused[0], "start": paused[1], "end": paused[2]}
                continue
            j = first_riser
            if related is not None:
                j = _first_riser(
                    episodes, [m for m in group if episodes[m]["tier"] in related], tie, depth
                )
            episodes[i]["root_tier"] = episodes[j]["tier"]
            source[i] = j
        # The burst a stall releases rises in front of the paused tier's callers after the
        # first riser, which was found paused-rooted: it shares that root (the requests the
        # catalogue's database held fill orders at once when it resumes: its stall is the cause)
        for i, j in source.items():
            if j != i and episodes[j].get("paused"):
                episodes[i]["root_tier"] = episodes[j]["root_tier"]


def push_back_roots(
    episodes: list[dict[str, Any]],
    bottlenecks: Sequence[dict[str, Any]],
    downstream: Callable[[str], frozenset[str]],
) -> None:
    """Name the hardware bottleneck as the root of the incidents it pushed back.

    At a level where the bottleneck analysis found a hardware resource (cpu, disk) the primary
    bottleneck, a saturation incident (a second or longer) whose root is a component in front
    of it (``downstream(root)`` holds the primary's tier) and whose root resource is not
    hardware (a full worker or connection pool, a queue) is that bottleneck's push-back: the
    requests queue in front of the saturated component. Its root becomes the primary's tier
    (``pushed_from`` keeps the root found by the onsets). Stalls (a root found paused) and
    millibottlenecks keep their root: a paused process is its own cause, and a sub-second
    episode at such a level may be one too. Episodes need their setup and level (:func:`place`)
    first.
    """
    primary: dict[tuple[str, float], str] = {}
    for b in bottlenecks:
        p = b.get("primary")
        if p and b.get("level") is not None and p.get("resource") in _HARDWARE:
            primary[(str(b["setup"]), float(b["level"]))] = str(p["tier"])
    incidents: dict[int, list[dict[str, Any]]] = {}
    for ep in episodes:
        incidents.setdefault(int(ep.get("incident", -1)), []).append(ep)
    for members in incidents.values():
        # a stall may begin inside the incident: it keeps its own root (see assign_roots)
        rest = [e for e in members if not e.get("paused")]
        if not rest or any(e["kind"] != "saturation" for e in rest):
            continue
        root = Counter(e["root_tier"] for e in rest).most_common(1)[0][0]
        own = [e for e in rest if e["tier"] == root]
        if not own:
            continue
        first = min(own, key=lambda e: e["start"])
        level = first.get("level")
        cause = None if level is None else primary.get((str(first.get("setup")), float(level)))
        if cause is None or cause == root or cause not in downstream(str(root)):
            continue
        if any(e["resource"] in _HARDWARE for e in own):
            continue  # the root's own hardware saturated too: a cause of its own
        for e in rest:
            if e["root_tier"] == root:
                e["root_tier"] = cause
                e["pushed_from"] = root


def _related(graph: Graph | None, tier: str) -> frozenset[str] | None:
    """``tier``, the components its calls reach and those whose calls reach it (None: every
    tier, without a graph or for a tier outside it such as the client)."""
    if graph is None or tier not in graph:
        return None
    return frozenset({tier} | graph.downstream(tier) | graph.upstream(tier))


def _first_riser(
    episodes: list[dict[str, Any]], members: list[int], tie: float, depth: dict[str, int]
) -> int:
    """The episode of the deepest tier among the first of ``members`` to rise (onsets within
    ``tie``)."""
    first = min(episodes[i]["start"] for i in members)
    early = [i for i in members if episodes[i]["start"] <= first + tie + 1e-9]
    return max(early, key=lambda i: (depth.get(episodes[i]["tier"], -1), -i))


def _paused_tier(
    frozen: dict[str, list[tuple[float, float]]],
    tiers: Sequence[str],
    first: float,
    min_frozen_s: float,
    resumed_s: float = 0.0,
) -> tuple[str, float, float] | None:
    """The tier that froze first, for ``min_frozen_s`` or more, in the half second before
    ``first`` (an episode's start) or just after it, and was still frozen at ``first`` or had
    resumed at most ``resumed_s`` before (the episode is then the burst of requests it held
    back); ties go to the shallowest tier.

    The paused tier freezes first. The others follow: the tiers behind it receive nothing at
    once (the same sample, hence the tie rule), and in a closed system the tiers in front of it
    fall silent a little later, once every user waits for the paused tier."""
    depth = {t: i for i, t in enumerate(tiers)}
    found = [
        (a, depth[tier], tier, b)
        for tier in tiers
        for a, b in frozen.get(tier, [])
        if b - a >= min_frozen_s - 1e-9
        and first - 0.5 <= a <= first + 0.2
        and first <= b + resumed_s + 1e-9
    ]
    if not found:
        return None
    a, _, tier, b = min(found)
    return tier, a, b


def vlrt_links(
    start: np.ndarray, end: np.ndarray, episodes: list[dict[str, Any]], threshold: float
) -> tuple[int, int]:
    """(VLRT count, explained count); sets ``vlrt_requests`` on every episode.

    A request with end - start >= ``threshold`` is explained by an episode whose interval
    [a, b) its lifetime [start, end] overlaps (start < b and end > a).
    """
    s = np.asarray(start, dtype=float)
    e = np.asarray(end, dtype=float)
    keep = np.isfinite(s) & np.isfinite(e) & (e - s >= threshold)
    s, e = s[keep], e[keep]
    for ep in episodes:
        ep["vlrt_requests"] = 0
    if s.size == 0:
        return 0, 0
    ss, es = np.sort(s), np.sort(e)
    for ep in episodes:
        ep["vlrt_requests"] = int(
            np.searchsorted(ss, ep["end"], side="left")
            - np.searchsorted(es, ep["start"], side="right")
        )
    explained = overlapping(s, e, [(ep["start"], ep["end"]) for ep in episodes])
    return int(s.size), int(explained.sum())


def overlapping(
    start: np.ndarray, end: np.ndarray, intervals: list[tuple[float, float]]
) -> np.ndarray:
    """Which lifetimes [start, end] overlap one of ``intervals`` [a, b) (start < b, end > a)."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if not merged:
        return np.zeros(np.shape(start), dtype=bool)
    ms = np.array([m[0] for m in merged])
    me = np.array([m[1] for m in merged])
    # the last merged interval starting before the request ends must end after it starts
    j = np.searchsorted(ms, end, side="left") - 1
    return (j >= 0) & (me[np.maximum(j, 0)] > start)


def spans_of(
    events: pl.DataFrame | None, points: pl.DataFrame | None
) -> list[tuple[float, float, str, float | None, int | None]]:
    """(t_start, t_end, setup, level, rep) spans to place episodes in: the phases of
    ``events``, else the steady windows of ``points``."""
    spans: list[tuple[float, float, str, float | None, int | None]] = []
    if events is not None and events.height and "kind" in events.columns:
        for t0, t1, detail in (
            events.filter(pl.col("kind") == "phase")
            .select("t_start", "t_end", "detail")
            .iter_rows()
        ):
            try:
                d = json.loads(detail or "{}")
            except (TypeError, ValueError):
                continue
            if not isinstance(d, dict) or t0 is None or t1 is None:
                continue
            level = d.get("level")
            rep = d.get("rep")
            spans.append(
                (
                    float(t0),
                    float(t1),
                    str(d.get("setup", "s0")),
                    None if level is None else float(level),
                    None if rep is None else int(rep),
                )
            )
    if not spans and points is not None and points.height and "t_start" in points.columns:
        for setup, level, rep, t0, t1 in points.select(
            "setup", "level", "rep", "t_start", "t_end"
        ).iter_rows():
            if t0 is not None and t1 is not None:
                spans.append((float(t0), float(t1), str(setup), level, rep))
    return sorted(spans)


def place(
    episodes: list[dict[str, Any]],
    spans: Sequence[tuple[float, float, str, float | None, int | None]],
) -> None:
    """Set setup/level/rep of each episode from the span containing its start (else None)."""
    starts = np.array([s[0] for s in spans])
    for ep in episodes:
        ep["setup"] = ep["level"] = ep["rep"] = None
        if not spans:
            continue
        j = int(np.searchsorted(starts, ep["start"], side="right")) - 1
        if j >= 0 and ep["start"] < spans[j][1]:
            _, _, ep["setup"], ep["level"], ep["rep"] = spans[j]
