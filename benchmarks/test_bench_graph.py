"""Call graphs cost what three tiers cost: the monitor and the millibottleneck analysis.

1. **Monitor overhead** at 50 ms on examples/graph.yaml's six components (seven nodes' worth
   of cgroup files, gauges and the callers' ``calls_out`` gauges) against the three-tier demo
   stack, both under the same light load (wrk, 4 connections), in the same process run.
   Target: the graph <= 3 % of one core.
2. **Analysis of 1 M component visits**: the millibottleneck pipeline (50 ms windows, episodes,
   roots on the call graph, VLRT links) on 1 M visit records of the six-component graph
   (:func:`tierscope.analysis.datasets.graph_requests`) against 1 M records of a three-tier
   chain (:func:`~tierscope.analysis.datasets.chain_requests`), both with stalls injected.
   Target: graph / three tiers <= 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from benchmarks.harness import measure, print_table
from benchmarks.test_bench_runner import deployed, wrk_run
from tierscope.experiment.monitor import Monitor, NodeProbe
from tierscope.experiment.targets import Deployment
from tierscope.spec.experiment import SystemSpec
from tierscope.spec.graph import Graph

pytestmark = pytest.mark.timeout(1800)
Recorder = Callable[[str, Mapping[str, Any]], Path]
REPO = Path(__file__).resolve().parents[1]
GRAPH_SPEC = REPO / "examples" / "graph.yaml"
MONITOR_TARGET = 0.03
ANALYSIS_TARGET = 2.0
VISITS = 1_000_000
SAMPLE_S = 10.0
WIDTH = 0.05


def graph_system() -> SystemSpec:
    return SystemSpec.model_validate(yaml.safe_load(GRAPH_SPEC.read_text())["system"])


def all_probes(dep: Deployment) -> list[NodeProbe]:
    return [
        NodeProbe(n.tier, n.name, n.cgroup, quota_cores=n.quota, gauges=n.gauges,
                  extra=n.extra_metrics)
        for n in dep.nodes
    ]  # fmt: skip


def overhead(system: SystemSpec, path: str) -> dict[str, float]:
    with deployed(system) as dep:
        load = wrk_run(dep.entry_urls[0] + path, 4, SAMPLE_S + 4)
        try:
            time.sleep(1.0)
            mon = Monitor(WIDTH, time.monotonic(), all_probes(dep)).start()
            time.sleep(SAMPLE_S)
            mon.stop()
            return {"cores": mon.overhead, "nodes": len(dep.nodes), "ticks": mon.ticks,
                    "late_ticks": mon.late_ticks, "rows": mon.drain().height}  # fmt: skip
        finally:
            load.kill()
            load.communicate()


def test_monitor_overhead_on_six_components(record: Recorder) -> None:
    three = overhead(SystemSpec(tiers={"web": {"cpu": 0.5}, "app": {"cpu": 0.5},
                                       "db": {"cpu": 0.3}}), "/story?id=5")  # fmt: skip
    graph = overhead(graph_system(), "/")
    ratio = graph["cores"] / three["cores"]
    print(
        "\nmonitor overhead at 50 ms under light load (fraction of one core):\n"
        f"  three tiers ({three['nodes']} nodes): {three['cores']:.4f} "
        f"({three['late_ticks']} of {three['ticks']} ticks late)\n"
        f"  graph ({graph['nodes']} nodes):       {graph['cores']:.4f} "
        f"({graph['late_ticks']} of {graph['ticks']} ticks late)\n"
        f"  graph / three tiers: {ratio:.2f}x; target graph <= {MONITOR_TARGET:.0%} of a core"
    )
    record("graph_monitor_overhead", {"three_tiers": three, "graph": graph, "ratio": ratio})
    assert graph["cores"] <= MONITOR_TARGET


# ---- analysis of 1 M visits ------------------------------------------------------------------
def shop_graph() -> Graph:
    return graph_system().graph


def graph_visits() -> Any:
    from tierscope.analysis.datasets import Stall, graph_requests

    g = shop_graph()
    service = {"gateway": 0.0003, "catalogue": 0.0006, "catalogue-db": 0.0008,
               "orders": 0.0004, "payment": 0.0009, "orders-db": 0.0006}  # fmt: skip
    per_request = 1 + 3 + 0.8 * 3  # client, gateway and the catalogue's two, orders' three
    stalls = [Stall("catalogue-db", float(t), 0.3) for t in np.arange(10.0, 900.0, 10.0)]
    n = int(VISITS / per_request)
    return graph_requests(n, n / 600.0, g, service, stalls=stalls, seed=1), g


def chain_visits() -> Any:
    from tierscope.analysis.datasets import Stall, chain_requests

    stalls = [Stall("app", float(t), 0.3) for t in np.arange(10.0, 900.0, 10.0)]
    n = VISITS // 4
    service = {"web": 0.0003, "app": 0.0005, "db": 0.0004}
    return chain_requests(n, n / 600.0, service, stalls=stalls, seed=1), Graph.chain(list(service))


def pipeline(req: Any, graph: Graph) -> dict[str, Any]:
    import polars as pl

    from tierscope.analysis import millibottlenecks as mb
    from tierscope.spec.analysis import AnalysisOptions

    order = ["client", *sorted(graph.names, key=graph.depth)]
    tl = mb.timeline(req, WIDTH)
    episodes, _ = mb.detect_episodes(tl, order, AnalysisOptions())
    mb.assign_roots(episodes, order, WIDTH, graph=graph)
    front = req.filter(pl.col("tier") == "client")
    vlrt = mb.vlrt_links(front["start"].to_numpy(), front["end"].to_numpy(), episodes, 0.2)
    return {"episodes": episodes, "vlrt": vlrt}


def test_analysis_of_a_million_visits_graph_vs_three_tiers(record: Recorder) -> None:
    g_req, g = graph_visits()
    c_req, c = chain_visits()
    ours, g_out = measure(f"graph, 6 components ({g_req.height:,} rows)",
                          lambda: pipeline(g_req, g), repeats=5)  # fmt: skip
    anchor, _ = measure(f"three tiers ({c_req.height:,} rows)",
                            lambda: pipeline(c_req, c), repeats=5)  # fmt: skip
    ratio = ours.median / anchor.median
    roots = {e["root_tier"] for e in g_out["episodes"] if e["tier"] == "catalogue"}
    print_table(
        "millibottleneck analysis of 1 M component visits",
        [ours, anchor],
        reference=anchor,
        notes=[
            f"graph / three tiers = {ratio:.2f} (target <= {ANALYSIS_TARGET}); "
            f"{len(g_out['episodes'])} graph episodes, catalogue's rooted at {sorted(roots)}"
        ],
    )
    record(
        "graph_analysis_1M_visits",
        {"graph": ours.summary(), "three_tiers": anchor.summary(), "ratio": ratio,
         "graph_rows": g_req.height, "three_tier_rows": c_req.height},
    )  # fmt: skip
    assert ratio <= ANALYSIS_TARGET
