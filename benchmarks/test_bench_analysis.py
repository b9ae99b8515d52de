"""Speed of the millibottleneck analysis on 1 M requests x 4 tiers against a pandas version.

What is measured: from a request table in the store's format (4 M rows: tiers client, web,
app, db; 1,000,000 requests at 1,200/s with a 300 ms stall of the app tier every 10 s), the
per-tier 50 ms windows (time-average and maximum queue by event sweep, completions,
point-in-time response time mean / max / p99), the saturation loads, the episodes with their
onsets and root tiers, and the VLRT links: ``tierscope.analysis.millibottlenecks`` against a
straightforward pandas implementation of the same rules written below (event table with window
edges, cumsum, groupby aggregations, run labelling with shift/cumsum), which is what an
engineer writes with pandas. Both must agree (windows to 1e-9, episodes exactly) so the timings
compare equal answers. Targets: tierscope <= 2 s with one thread (POLARS_MAX_THREADS=1 is set
in a child process) and >= 10x faster than pandas, in the same process run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.harness import measure, print_table

pytestmark = pytest.mark.timeout(1800)
Recorder = Callable[[str, Mapping[str, Any]], Path]

N_REQUESTS = 1_000_000
RATE = 1200.0
SERVICE = {"web": 0.0003, "app": 0.0005, "db": 0.0004}
TIERS = ["client", "web", "app", "db"]
WIDTH = 0.05
TARGET_S = 2.0
TARGET_RATIO = 10.0
REPO = Path(__file__).resolve().parents[1]


def make_requests() -> Any:
    from tierscope.analysis.datasets import Stall, chain_requests

    stalls = [Stall("app", float(t), 0.3) for t in np.arange(10.0, 900.0, 10.0)]
    return chain_requests(N_REQUESTS, RATE, SERVICE, stalls=stalls, seed=1)


def tierscope_analysis(req: Any) -> dict[str, Any]:
    """The analysis under test: windows, episodes, roots, VLRT links."""
    import polars as pl

    from tierscope.analysis import millibottlenecks as mb
    from tierscope.spec.analysis import AnalysisOptions

    options = AnalysisOptions()
    tl = mb.timeline(req, WIDTH)
    episodes, _ = mb.detect_episodes(tl, TIERS, options)
    mb.assign_roots(episodes, TIERS, WIDTH)
    front = req.filter(pl.col("tier") == "client")
    vlrt = mb.vlrt_links(front["start"].to_numpy(), front["end"].to_numpy(), episodes, 0.2)
    return {"timeline": tl, "episodes": episodes, "vlrt": vlrt}


# ---- the pandas baseline -----------------------------------------------------------------------
def pandas_analysis(df: Any) -> dict[str, Any]:
    """The same rules with pandas, written the way pandas is usually used."""
    import pandas as pd

    from tierscope.spec.analysis import AnalysisOptions

    opt = AnalysisOptions()
    t0 = np.floor(df["start"].min() / WIDTH) * WIDTH
    n = int(np.floor((df["end"].max() - t0) / WIDTH)) + 1
    df = df.assign(start=df["start"] - t0, end=df["end"] - t0)  # times from the grid's origin
    edges = WIDTH * np.arange(n + 1)
    windows: dict[str, pd.DataFrame] = {}
    sweeps: dict[str, pd.DataFrame] = {}
    for tier, g in df.groupby("tier"):
        ev = pd.concat(
            [
                pd.DataFrame({"t": g["start"].to_numpy(), "d": 1}),
                pd.DataFrame({"t": g["end"].to_numpy(), "d": -1}),
                pd.DataFrame({"t": edges, "d": 0}),
            ],
            ignore_index=True,
        ).sort_values(["t", "d"], kind="mergesort")
        ev["q"] = ev["d"].cumsum()
        ev["dt"] = ev["t"].shift(-1).fillna(edges[-1]) - ev["t"]
        ev["win"] = np.minimum(np.searchsorted(edges, ev["t"].to_numpy(), side="right") - 1, n)
        area = (ev["q"] * ev["dt"]).groupby(ev["win"]).sum()
        qmax = ev.groupby("win")["q"].max()
        g = g.assign(rt=g["end"] - g["start"], win=np.floor(g["end"] / WIDTH).astype(int))
        pit = g.groupby("win")["rt"].agg(["count", "mean", "max"])
        p99 = g.groupby("win")["rt"].quantile(0.99, interpolation="higher")
        w = pd.DataFrame(index=pd.RangeIndex(n))
        w["q_mean"] = area.reindex(w.index, fill_value=0.0) / WIDTH
        w["q_max"] = qmax.reindex(w.index).astype(float)
        w["completions"] = pit["count"].reindex(w.index, fill_value=0).astype(float)
        w["rt_mean"] = pit["mean"].reindex(w.index)
        w["rt_max"] = pit["max"].reindex(w.index)
        w["rt_p99"] = p99.reindex(w.index)
        windows[tier] = w
        sweeps[tier] = ev[ev["d"] != 0][["t", "q"]]

    episodes = []
    bridge = round(opt.merge_gap_s / WIDTH)
    for tier in TIERS[1:]:
        w = windows[tier]
        x = w["completions"] / WIDTH
        act = w[(w["q_mean"] > 0) | (x > 0)].assign(x=x)
        act = act.sort_values("q_mean", kind="mergesort")
        k = min(40, len(act) // 20)
        sizes = [len(b) for b in np.array_split(np.arange(len(act)), k)]
        act["bin"] = np.repeat(np.arange(k), sizes)
        bins = act.groupby("bin")[["q_mean", "x"]].mean()
        cap = bins["x"].max()
        q_star = bins.loc[bins["x"] >= 0.95 * cap, "q_mean"].iloc[0]
        typical = w["rt_mean"].dropna().quantile(0.10)
        flag = w["q_mean"] > q_star
        hit = w.index[flag].to_series()
        run_id = (hit.diff() > bridge + 1).cumsum()
        for _, idx in hit.groupby(run_id):
            a, b = int(idx.iloc[0]), int(idx.iloc[-1])
            seg = w["q_mean"].iloc[a : b + 1]
            peak = int(seg.idxmax())
            late = w["rt_mean"].iloc[a : min(b + 3, n)]
            slowest = late.max() if late.notna().any() else (b - a + 1) * WIDTH
            if slowest < max(typical + opt.min_delay_s, opt.rt_factor * typical):
                continue
            excess = w["q_mean"].iloc[peak] - q_star
            floor = q_star + opt.core_fraction * excess
            lo = peak
            while lo > a and w["q_mean"].iloc[lo - 1] >= floor:
                lo -= 1
            hi = peak
            while hi < b and w["q_mean"].iloc[hi + 1] >= floor:
                hi += 1
            first = lo * WIDTH
            before = round(1.0 / WIDTH)
            base = w["q_mean"].iloc[max(0, lo - before) : lo].median() if lo > 0 else 0.0
            sw = sweeps[tier]
            near = sw[(sw["t"] > max(0.0, first - 1.0)) & (sw["t"] <= (peak + 1) * WIDTH)]
            low = np.flatnonzero((near["q"] <= base).to_numpy())
            if len(low):
                onset = near["t"].iloc[min(low[-1] + 1, len(near) - 1)]
            else:
                onset = max(0.0, first - 1.0)
            episodes.append(
                {"tier": tier, "start": t0 + min(first, onset), "end": t0 + (hi + 1) * WIDTH}
            )
    # roots: overlapping episodes of one kind form incidents; earliest onset, deepest tier on
    # a tie
    for e in episodes:
        e["kind"] = "millibottleneck" if e["end"] - e["start"] < 1.0 else "saturation"
    episodes.sort(key=lambda e: (e["kind"], e["start"], e["end"]))
    reach, kind, group = -np.inf, None, []
    groups = []
    for e in episodes:
        if e["kind"] != kind or e["start"] > reach + 1e-9:
            group = []
            groups.append(group)
            reach, kind = e["end"], e["kind"]
        reach = max(reach, e["end"])
        group.append(e)
    for grp in groups:
        first = min(e["start"] for e in grp)
        tie = max(WIDTH, 0.1 * min(e["end"] - e["start"] for e in grp))
        early = [e for e in grp if e["start"] <= first + tie + 1e-9]
        root = max(early, key=lambda e: TIERS.index(e["tier"]))["tier"]
        for e in grp:
            e["root_tier"] = root
    client = df[df["tier"] == "client"]
    slow = client[client["end"] - client["start"] >= 0.2]
    explained = 0
    for s, e in zip(slow["start"], slow["end"], strict=True):
        explained += any(s < ep["end"] and e > ep["start"] for ep in episodes)
    return {"windows": windows, "episodes": episodes, "vlrt": (len(slow), explained)}


def check_agreement(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    tl = ours["timeline"]
    for tier in TIERS:
        tw, w = tl.tiers[tier], theirs["windows"][tier]
        np.testing.assert_allclose(tw.q_mean, w["q_mean"].to_numpy(), rtol=1e-7, atol=1e-7)
        np.testing.assert_array_equal(tw.q_max, w["q_max"].to_numpy())
        np.testing.assert_array_equal(tw.completions, w["completions"].to_numpy())
        for col in ("rt_mean", "rt_max", "rt_p99"):  # tierscope orders times at 1 µs
            np.testing.assert_allclose(getattr(tw, col), w[col].to_numpy(), atol=1.01e-6)
    ep = [
        (e["tier"], round(e["start"], 9), round(e["end"], 9), e["root_tier"])
        for e in sorted(ours["episodes"], key=lambda e: (e["start"], e["tier"]))
    ]
    ref = [
        (e["tier"], round(e["start"], 9), round(e["end"], 9), e["root_tier"])
        for e in sorted(theirs["episodes"], key=lambda e: (e["start"], e["tier"]))
    ]
    assert ep == ref
    assert ours["vlrt"] == theirs["vlrt"]


def _single_thread_timing() -> dict[str, float]:
    """tierscope's time with one thread, measured in a child process (polars reads
    POLARS_MAX_THREADS once, at import)."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from benchmarks.harness import measure\n"
        "from benchmarks.test_bench_analysis import make_requests, tierscope_analysis\n"
        "req = make_requests()\n"
        "t, _ = measure('tierscope', lambda: tierscope_analysis(req), repeats=5)\n"
        "print(json.dumps(t.summary()))\n"
    )
    env = dict(os.environ, POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=900,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_millibottleneck_analysis_speed(record: Recorder) -> None:
    req = make_requests()
    df = req.select("tier", "request_id", "start", "end").to_pandas()
    ours, result = measure(
        "tierscope (numpy sorts + native sweep)", lambda: tierscope_analysis(req), repeats=5
    )
    theirs, reference = measure("pandas baseline", lambda: pandas_analysis(df), repeats=1)
    check_agreement(result, reference)
    one_thread = _single_thread_timing()
    ratio = theirs.median / ours.median
    print_table(
        f"millibottleneck analysis of {N_REQUESTS:,} requests x {len(TIERS)} tiers "
        f"({len(result['episodes'])} episodes)",
        [ours, theirs],
        reference=ours,
        notes=[
            f"tierscope with one thread: median {one_thread['median_s']:.3f} s "
            f"(target <= {TARGET_S} s); pandas / tierscope = {ratio:.1f}x "
            f"(target >= {TARGET_RATIO}x)"
        ],
    )
    record(
        "millibottleneck_analysis_1M_x4",
        {
            "requests": N_REQUESTS,
            "tiers": len(TIERS),
            "tierscope": ours.summary(),
            "tierscope_one_thread": one_thread,
            "pandas": theirs.summary(),
            "ratio_pandas_over_tierscope": ratio,
            "episodes": len(result["episodes"]),
        },
    )
    assert one_thread["median_s"] <= TARGET_S
    assert ratio >= TARGET_RATIO
