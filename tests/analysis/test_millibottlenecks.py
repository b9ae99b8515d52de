"""Millibottlenecks against injected ground truth: stalls in a simulated twin and in synthetic
chains of tiers (nested and per-visit records), exact window statistics against brute force,
VLRT links, and the real cgroup data imported as metrics only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.analysis.cgroup_data import data_dir, write_metrics_csv
from tierscope.analysis import analyze
from tierscope.analysis.datasets import Stall, chain_requests
from tierscope.analysis.millibottlenecks import tier_windows, vlrt_links
from tierscope.ingest.csv import import_csv
from tierscope.sim import record_simulated_sweep
from tierscope.spec import load_model
from tierscope.spec.analysis import AnalysisOptions
from tierscope.store import Run, read_run

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "examples" / "models" / "millibottleneck-twin.yaml"


def test_window_statistics_match_brute_force() -> None:
    rng = np.random.default_rng(5)
    start = rng.uniform(0, 2, 300)
    end = start + rng.exponential(0.05, 300)
    width, n = 0.05, 60
    tw = tier_windows("x", start, end, 0.0, width, n)
    fine = np.linspace(0, n * width, 600_001)[:-1] + 0.5 * n * width / 600_000
    q = ((start[None, :] <= fine[:, None]) & (end[None, :] > fine[:, None])).sum(axis=1)
    np.testing.assert_allclose(tw.q_mean, q.reshape(n, -1).mean(axis=1), atol=2e-3)
    for k in range(n):
        a, b = k * width, (k + 1) * width
        inside = [(s, e) for s, e in zip(start, end, strict=True) if s < b and e > a]
        present_at_a = sum(1 for s, e in zip(start, end, strict=True) if s <= a < e)
        events = sorted({a, *(s for s, _ in inside if s >= a)})
        expected_max = (
            max(sum(1 for s, e in zip(start, end, strict=True) if s <= t < e) for t in events)
            if events
            else present_at_a
        )
        assert tw.q_max[k] == expected_max
        rts = np.array([e - s for s, e in zip(start, end, strict=True) if a <= e < b])
        assert tw.completions[k] == rts.size
        if rts.size:
            assert tw.rt_mean[k] == pytest.approx(rts.mean(), abs=1e-6)
            assert tw.rt_max[k] == pytest.approx(rts.max(), abs=1e-6)
            assert tw.rt_p99[k] == pytest.approx(np.percentile(rts, 99, method="higher"), abs=1e-6)


def twin_run(tmp_path: Path, *, stalls: bool) -> tuple[dict, pl.DataFrame]:
    model = load_model(TWIN)
    if not stalls:
        model = model.model_copy(
            update={"simulation": model.simulation.model_copy(update={"perturbations": []})}
        )
    record_simulated_sweep(
        {"s0": model}, tmp_path / "twin", levels=[100, 200], steady=40, ramp_up=2
    )
    run = read_run(tmp_path / "twin")
    return analyze(run), run.events.filter(pl.col("kind") == "stall")


def test_stalls_of_the_twin_are_found_with_their_start_and_root(tmp_path: Path) -> None:
    doc, stalls = twin_run(tmp_path, stalls=True)
    truth = stalls["t_start"].to_list()
    assert len(truth) == 16
    found = started = rooted = 0
    for t in truth:
        hits = [e for e in doc["episodes"] if e["start"] < t + 0.3 and e["end"] > t]
        if not hits:
            continue
        found += 1
        first = min(hits, key=lambda e: e["start"])
        started += abs(first["start"] - t) <= 0.1
        rooted += first["root_tier"] == "app"
    assert found / len(truth) >= 0.9
    assert started / len(truth) >= 0.9
    assert rooted / len(truth) >= 0.9
    assert all(e["kind"] == "millibottleneck" for e in doc["episodes"])
    # every episode explains a stall: none is invented
    assert all(any(e["start"] < t + 0.3 and e["end"] > t for t in truth) for e in doc["episodes"])


def test_clean_unsaturated_twin_has_no_episodes(tmp_path: Path) -> None:
    doc, stalls = twin_run(tmp_path, stalls=False)
    assert stalls.height == 0
    assert doc["episodes"] == []


SERVICE = {"web": 0.0008, "app": 0.0012, "db": 0.001}


@pytest.mark.parametrize("nested", [True, False], ids=["nested", "per-visit"])
@pytest.mark.parametrize("culprit", ["app", "db", "web"])
def test_root_tier_of_chain_stalls(culprit: str, nested: bool) -> None:
    truth = [Stall(culprit, float(t), 0.25) for t in range(5, 60, 5)]
    req = chain_requests(30_000, 450.0, SERVICE, stalls=truth, nested=nested, seed=11)
    from tierscope.analysis.millibottlenecks import assign_roots, detect_episodes, timeline

    tiers = ["client", "web", "app", "db"]
    opts = AnalysisOptions()
    episodes, _ = detect_episodes(timeline(req, 0.05), tiers, opts)
    assign_roots(episodes, tiers, 0.05)
    right = 0
    for stall in truth:
        hits = [e for e in episodes if e["start"] < stall.start + 0.25 and e["end"] > stall.start]
        if hits and abs(min(e["start"] for e in hits) - stall.start) <= 0.1:
            right += hits[0]["root_tier"] == culprit
    assert right >= 0.9 * len(truth)


def test_vlrt_requests_are_linked_to_the_episodes_that_explain_them() -> None:
    truth = [Stall("db", float(t), 1.5) for t in (10, 25, 40)]
    req = chain_requests(25_000, 500.0, SERVICE, stalls=truth, seed=3)
    # one very slow request far from any stall: it must stay unexplained
    lonely = pl.DataFrame(
        {
            "tier": ["client"],
            "request_id": ["lonely"],
            "start": [31.0],
            "end": [32.5],
            "setup": ["s0"],
            "level": [None],
            "rep": [0],
            "interaction": ["req"],
            "status": ["ok"],
        },
        schema=req.schema,
    )
    req = pl.concat([req, lonely])

    run = Run(
        path=Path("synthetic"),
        info={"spec": {"system": {"tiers": {"web": {}, "app": {}, "db": {}}}}},
        metrics=None,
        requests=req,
        events=None,
        points=None,
    )
    doc = analyze(run, AnalysisOptions(vlrt_s=1.0))
    v = doc["vlrt"]
    front = req.filter(pl.col("tier") == "client")
    slow = front.filter(pl.col("end") - pl.col("start") >= 1.0)
    assert v["count"] == slow.height and v["count"] > 100
    assert v["explained"] == v["count"] - 1
    assert sum(e["vlrt_requests"] for e in doc["episodes"] if e["tier"] == "db") >= v["explained"]
    assert {e["root_tier"] for e in doc["episodes"]} == {"db"}
    assert all(e["kind"] == "saturation" for e in doc["episodes"] if e["tier"] == "db")


def test_vlrt_links_overlap_rule() -> None:
    episodes = [{"start": 1.0, "end": 2.0}, {"start": 5.0, "end": 6.0}]
    start = np.array([0.0, 1.9, 2.5, 4.0, 7.0])
    end = np.array([1.5, 3.5, 3.6, 4.5, 8.5])
    count, explained = vlrt_links(start, end, episodes, 1.0)
    assert (count, explained) == (4, 2)  # 0.5 s is not VLRT; [2.5, 3.6] and [7, 8.5] miss
    assert [e["vlrt_requests"] for e in episodes] == [2, 0]


@pytest.mark.skipif(data_dir() is None, reason="../shared/validation/cgroup-50ms not present")
def test_real_cgroup_data_gives_one_saturation_episode_per_pinned_container(
    tmp_path: Path,
) -> None:
    names = ["container-a", "container-b", "container-c", "container-d"]
    spans = write_metrics_csv(tmp_path / "metrics.csv", names)
    import_csv(tmp_path / "run", metrics=tmp_path / "metrics.csv")
    run = read_run(tmp_path / "run")
    doc = analyze(run)
    origin = min(float(t) for t in pl.read_csv(tmp_path / "metrics.csv")["ts"].to_list())
    assert len(doc["episodes"]) == len(names)
    for e in doc["episodes"]:
        first, last = spans[e["tier"]]
        assert (e["resource"], e["kind"], e["source"]) == ("cpu", "saturation", "metrics")
        # the episode covers the throttled stretch, to within two 50 ms samples
        assert e["start"] == pytest.approx(first - origin, abs=0.1)
        assert e["end"] == pytest.approx(last - origin, abs=0.1)
        assert e["duration"] > 200


def test_a_paused_tier_is_the_root_even_though_its_queue_rises_late() -> None:
    """Tier gauges at 50 ms: app accepts and completes nothing from 5.0 to 5.3 s while web keeps
    accepting; web's queue episode starts first, yet the root is the paused app. A web pause
    freezes app and db too, and then web is the root (the shallowest paused tier)."""
    from tierscope.analysis.millibottlenecks import assign_roots, frozen_stretches

    t = np.round(np.arange(0.05, 10.0, 0.05), 2)

    def gauges(paused: dict[str, tuple[float, float]]) -> pl.DataFrame:
        rows = []
        for tier in ("web", "app", "db"):
            for ti in t:
                off = any(a < ti <= b for tr, (a, b) in paused.items() if tr == tier)
                for metric in ("arrivals_s", "throughput_s"):
                    rows.append((ti, tier, f"{tier}-1", metric, 0.0 if off else 40.0))
        return pl.DataFrame(rows, schema=["t", "tier", "node", "metric", "value"], orient="row")

    def root(paused: dict[str, tuple[float, float]]) -> str:
        episodes = [
            {"tier": "web", "start": 5.02, "end": 5.5, "duration": 0.48, "kind": "millibottleneck"},
            {"tier": "app", "start": 5.3, "end": 5.45, "duration": 0.15, "kind": "millibottleneck"},
        ]
        frozen = frozen_stretches(gauges(paused), ["web", "app", "db"])
        assign_roots(episodes, ["client", "web", "app", "db"], 0.05, frozen)
        assert episodes[0]["root_tier"] == episodes[1]["root_tier"]
        return episodes[0]["root_tier"]

    assert root({"app": (5.0, 5.3), "db": (5.0, 5.3)}) == "app"
    assert root({"web": (5.0, 5.3), "app": (5.0, 5.3), "db": (5.0, 5.3)}) == "web"
    # without gauges the onset rule applies: web rose first and is the deepest early tier
    assert root({}) == "web"


def test_an_idle_tier_is_not_taken_for_a_paused_one() -> None:
    """At light load db often receives nothing for a few hundred ms. Such an idle stretch, begun
    before app's pause, must not win the root: nothing waited in front of db (app's queue was
    empty), while requests waited at web throughout app's pause. In a closed system web falls
    silent too, once every user waits; it froze later than app, so app stays the root."""
    from tierscope.analysis.millibottlenecks import assign_roots, frozen_stretches

    t = np.round(np.arange(0.05, 10.0, 0.05), 2)
    off = {"app": (5.0, 5.3), "db": (4.7, 5.3), "web": (5.1, 5.3)}
    rows = []
    for ti in t:
        for tier in ("web", "app", "db"):
            a, b = off[tier]
            silent = a < ti <= b
            for metric in ("arrivals_s", "throughput_s"):
                rows.append((ti, tier, f"{tier}-1", metric, 0.0 if silent else 40.0))
            waiting = {"web": 3.0 if 5.0 < ti <= 5.3 else 0.5, "app": 0.0, "db": 0.0}[tier]
            rows.append((ti, tier, f"{tier}-1", "queue_length", waiting))
        rows.append((ti, "client", "loadgen", "outstanding", 4.0))
    metrics = pl.DataFrame(rows, schema=["t", "tier", "node", "metric", "value"], orient="row")
    frozen = frozen_stretches(metrics, ["web", "app", "db"])
    assert frozen["db"] == []  # idle: nothing waited at app
    assert frozen["app"] == [(5.0, 5.3)]
    episodes = [
        {"tier": "web", "start": 5.02, "end": 5.5, "duration": 0.48, "kind": "millibottleneck"}
    ]
    assign_roots(episodes, ["client", "web", "app", "db"], 0.05, frozen)
    assert episodes[0]["root_tier"] == "app"


def test_the_tier_in_front_is_the_caller_in_the_call_graph() -> None:
    """gateway -> catalogue -> catalogue-db, gateway -> orders. catalogue-db is paused from 5.0
    to 5.3 s while requests wait at catalogue, its caller; orders, the component before it in
    the order by depth, has nothing waiting. Frozen only when judged by its caller."""
    from tierscope.analysis.millibottlenecks import frozen_stretches
    from tierscope.spec.graph import Call, Component, Graph

    graph = Graph.build(
        [
            Component("gateway", calls=(Call("catalogue"), Call("orders"))),
            Component("catalogue", calls=(Call("catalogue-db"),)),
            Component("catalogue-db"),
            Component("orders"),
        ],
        "gateway",
    )
    order = ["gateway", "catalogue", "orders", "catalogue-db"]  # by depth, then position
    t = np.round(np.arange(0.05, 10.0, 0.05), 2)
    rows = []
    for ti in t:
        for tier in order:
            silent = tier == "catalogue-db" and 5.0 < ti <= 5.3
            for metric in ("arrivals_s", "throughput_s"):
                rows.append((ti, tier, f"{tier}-1", metric, 0.0 if silent else 40.0))
            waiting = 3.0 if tier == "catalogue" and 5.0 < ti <= 5.3 else 0.0
            rows.append((ti, tier, f"{tier}-1", "queue_length", waiting))
        rows.append((ti, "client", "loadgen", "outstanding", 4.0))
    metrics = pl.DataFrame(rows, schema=["t", "tier", "node", "metric", "value"], orient="row")
    front = {c: graph.callers(c) for c in order}
    assert frozen_stretches(metrics, order, front=front)["catalogue-db"] == [(5.0, 5.3)]
    assert frozen_stretches(metrics, order)["catalogue-db"] == []  # judged by orders' queue


def shop_graph() -> Any:
    from tierscope.spec.graph import Call, Component, Graph

    return Graph.build(
        [
            Component("gateway", calls=(Call("catalogue"), Call("orders"))),
            Component("catalogue", calls=(Call("catalogue-db"),)),
            Component("catalogue-db"),
            Component("orders", calls=(Call("payment"),)),
            Component("payment"),
        ],
        "gateway",
    )


def test_a_tier_waiting_for_its_paused_callee_is_not_taken_for_paused() -> None:
    """catalogue-db is paused from 5.0 to 5.3 s. catalogue, waiting for it, holds the one call
    the gateway made to it and receives no new one for 0.1 s: it accepts and completes nothing
    either, but every call made to it is inside it (the gateway's calls out to catalogue equal
    catalogue's queue), whereas catalogue's calls to the paused database pile up at its door.
    The gateway (light load: every user's request is inside it) accepts and completes nothing
    for the whole stall while the client has requests out, but catalogue, behind it, holds
    requests: it waits. Only the database is frozen, and it is the root of catalogue's episode
    and of the gateway's; orders, on the gateway's other branch, fills up when the stall ends
    (the requests the database held go on to it) and shares the stall as its root."""
    from tierscope.analysis.millibottlenecks import assign_roots, frozen_stretches

    graph = shop_graph()
    order = ["gateway", "catalogue", "orders", "catalogue-db", "payment"]
    t = np.round(np.arange(0.05, 10.0, 0.05), 2)
    rows = []
    for ti in t:
        stalled = 5.0 < ti <= 5.3
        quiet = stalled and ti <= 5.1  # catalogue: no new call in the first 0.1 s
        for tier in order:
            off = (tier in ("catalogue-db", "gateway") and stalled) or (
                tier == "catalogue" and quiet
            )
            for metric in ("arrivals_s", "throughput_s"):
                rows.append((ti, tier, f"{tier}-1", metric, 0.0 if off else 40.0))
        held = 1.0 if quiet else 3.0 if stalled else 0.5
        rows += [
            (ti, "catalogue", "catalogue-1", "queue_length", held),
            (ti, "gateway", "gateway-1", "calls_out:catalogue", held),
            (ti, "catalogue", "catalogue-1", "calls_out:catalogue-db", held),
            (ti, "catalogue-db", "catalogue-db-1", "queue_length", 0.0 if stalled else 0.5),
            (ti, "client", "loadgen", "outstanding", 4.0),
        ]
    metrics = pl.DataFrame(rows, schema=["t", "tier", "node", "metric", "value"], orient="row")
    frozen = frozen_stretches(metrics, order, front={c: graph.callers(c) for c in order})
    assert frozen["catalogue"] == [] and frozen["gateway"] == []
    assert frozen["catalogue-db"] == [(5.0, 5.3)]
    episodes = [
        {"tier": t, "start": a, "end": b, "duration": b - a, "kind": "millibottleneck"}
        for t, a, b in (("catalogue", 5.02, 5.4), ("gateway", 5.02, 5.45), ("orders", 5.31, 5.5))
    ]
    assign_roots(episodes, ["client", *order], 0.05, frozen, graph=graph)
    assert [e["root_tier"] for e in episodes] == ["catalogue-db"] * 3
    assert "paused" not in episodes[2]  # orders found no pause of its own: it shares the root


def test_siblings_filling_up_at_once_are_two_causes() -> None:
    """On the graph, orders (pushed back by payment) and catalogue fill up in the same
    incident: orders' episode is rooted at payment, catalogue's at catalogue, not at payment
    (which its calls never reach); a gateway episode may be either's push-back: the deepest
    first riser, payment. Without the graph (a chain by depth) every episode gets payment."""
    from tierscope.analysis.millibottlenecks import assign_roots

    graph = shop_graph()
    order = ["client", "gateway", "catalogue", "orders", "catalogue-db", "payment"]

    def roots(with_graph: bool) -> dict[str, str]:
        episodes = [
            {"tier": t, "start": s, "end": 5.6, "duration": 5.6 - s, "kind": "millibottleneck"}
            for t, s in (("payment", 5.0), ("orders", 5.05), ("catalogue", 5.1), ("gateway", 5.2))
        ]
        assign_roots(episodes, order, 0.05, {}, graph=graph if with_graph else None)
        return {e["tier"]: e["root_tier"] for e in episodes}

    assert roots(True) == {
        "payment": "payment", "orders": "payment", "catalogue": "catalogue", "gateway": "payment"
    }  # fmt: skip
    assert set(roots(False).values()) == {"payment"}


def test_stalls_in_a_synthetic_graph_are_rooted_where_they_were_planted() -> None:
    """graph_requests: every visit's parent is a visit of its caller, nested in it; stalls of
    catalogue-db every 10 s are found at the catalogue (its caller) rooted at catalogue-db, and
    no episode of the orders branch is blamed on it."""
    from tierscope.analysis import millibottlenecks as mb
    from tierscope.analysis.datasets import graph_requests

    graph = shop_graph()
    service = {"gateway": 0.0003, "catalogue": 0.0006, "catalogue-db": 0.0008,
               "orders": 0.0004, "payment": 0.0009}  # fmt: skip
    stalls = [Stall("catalogue-db", float(t), 0.3) for t in range(10, 100, 10)]
    req = graph_requests(60_000, 600.0, graph, service, stalls=stalls, seed=3)
    visits = req.filter(pl.col("tier") != "client")
    parents = visits.join(
        visits.select("visit", pl.col("tier").alias("caller"), pl.col("start").alias("p_start"),
                      pl.col("end").alias("p_end")),
        left_on="parent", right_on="visit", how="left",
    )  # fmt: skip
    want = {c: (graph.callers(c) or [None])[0] for c in graph.names}
    assert all(want[t] == c for t, c in parents.select("tier", "caller").iter_rows())
    inner = parents.drop_nulls("caller")
    assert ((inner["start"] >= inner["p_start"]) & (inner["end"] <= inner["p_end"])).all()
    order = ["client", *sorted(graph.names, key=graph.depth)]
    episodes, _ = mb.detect_episodes(mb.timeline(req, 0.05), order, AnalysisOptions())
    mb.assign_roots(episodes, order, 0.05, graph=graph)
    for s in stalls:
        near = [e for e in episodes if e["tier"] == "catalogue" and abs(e["start"] - s.start) < 0.1]
        assert near and all(e["root_tier"] == "catalogue-db" for e in near), (s, near)
    assert not any(
        e["root_tier"] == "catalogue-db" for e in episodes if e["tier"] in ("orders", "payment")
    )


def test_the_burst_after_a_pause_is_rooted_in_the_paused_tier() -> None:
    """With nested records a paused app holds its requests, so web's queue may rise only as app
    resumes and the burst arrives. An episode starting within two windows of app's resumption
    is app's; one starting later has its own cause."""
    from tierscope.analysis.millibottlenecks import assign_roots, frozen_stretches

    t = np.round(np.arange(0.05, 10.0, 0.05), 2)
    rows = []
    for ti in t:
        for tier in ("web", "app", "db"):
            off = tier in ("app", "db") and 5.0 < ti <= 5.3
            for metric in ("arrivals_s", "throughput_s"):
                rows.append((ti, tier, f"{tier}-1", metric, 0.0 if off else 40.0))
    metrics = pl.DataFrame(rows, schema=["t", "tier", "node", "metric", "value"], orient="row")
    frozen = frozen_stretches(metrics, ["web", "app", "db"])
    assert frozen["app"] == [(5.0, 5.3)]

    def root(start: float) -> str:
        episodes = [
            {"tier": "web", "start": start, "end": start + 0.3, "duration": 0.3,
             "kind": "millibottleneck"}
        ]  # fmt: skip
        assign_roots(episodes, ["client", "web", "app", "db"], 0.05, frozen)
        return episodes[0]["root_tier"]

    assert root(5.35) == "app"  # one window after the resumption
    assert root(5.6) == "web"  # 0.3 s after: not the burst


def test_push_back_saturations_are_rooted_in_the_bottleneck_behind_them() -> None:
    """At a level whose primary bottleneck is db/cpu, a long app pool saturation is db's
    push-back; not so at a level without a bottleneck, for a stall, for the app's own CPU, or
    for a component the bottleneck is not behind (another branch of the call graph)."""
    from tierscope.analysis.millibottlenecks import push_back_roots
    from tierscope.spec.graph import THREE_TIERS, Call, Component, Graph

    def ep(incident: int, tier: str, resource: str, level: float, **extra: object) -> dict:
        return {"incident": incident, "tier": tier, "resource": resource, "root_tier": tier,
                "kind": "saturation", "start": 10.0 * incident, "setup": "s0",
                "level": level, "paused": None, **extra}  # fmt: skip

    bottlenecks = [
        {"setup": "s0", "level": 20.0, "kind": "none", "primary": None},
        {"setup": "s0", "level": 80.0, "kind": "single",
         "primary": {"tier": "db", "resource": "cpu"}},
    ]  # fmt: skip
    episodes = [
        ep(0, "app", "pool", 80.0),
        ep(0, "web", "queue", 80.0, root_tier="app"),
        ep(1, "app", "pool", 20.0),
        ep(2, "app", "queue", 80.0, paused={"tier": "app", "start": 20.0, "end": 20.3}),
        ep(3, "app", "cpu", 80.0),
        ep(4, "app", "pool", 80.0, kind="millibottleneck"),
    ]
    push_back_roots(episodes, bottlenecks, Graph.chain(THREE_TIERS).downstream)
    assert [e["root_tier"] for e in episodes] == ["db", "db", "app", "app", "app", "app"]
    assert episodes[0]["pushed_from"] == "app" and "pushed_from" not in episodes[2]

    fan_out = Graph.build(
        [
            Component("gateway", calls=(Call("catalogue"), Call("orders"))),
            Component("catalogue"),
            Component("orders", calls=(Call("payment"),)),
            Component("payment"),
        ],
        "gateway",
    )
    bottlenecks[1]["primary"] = {"tier": "payment", "resource": "cpu"}
    episodes = [ep(0, "catalogue", "workers", 80.0), ep(1, "orders", "pool", 80.0)]
    push_back_roots(episodes, bottlenecks, fan_out.downstream)
    assert [e["root_tier"] for e in episodes] == ["catalogue", "payment"]
