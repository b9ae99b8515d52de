"""Bottleneck kinds on metrics with planted saturation, and on simulated capped tiers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tierscope.analysis import analyze
from tierscope.analysis.bottleneck import analyze_bottlenecks, dependence, window_states
from tierscope.analysis.datasets import saturation_series
from tierscope.sim import record_simulated_sweep
from tierscope.spec import parse_model
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.graph import THREE_TIERS, Call, Component, Graph
from tierscope.store import read_run

STEADY = 120.0  # seconds: 120 windows of 1 s
DT = 0.05


def metrics_with(
    saturated: dict[str, np.ndarray], *, base: float = 0.5, seed: int = 0
) -> pl.DataFrame:
    """50 ms cpu_util samples of tiers web/app/db/client: 0.99 in the planted 1 s windows."""
    rng = np.random.default_rng(seed)
    t = np.arange(0, STEADY, DT)
    frames = []
    for tier in ("web", "app", "db", "client"):
        sec = np.floor(t).astype(int)
        busy = saturated.get(tier, np.zeros(int(STEADY), bool))[sec]
        value = np.where(busy, 0.99, base + rng.normal(0, 0.05, t.size))
        frames.append(
            pl.DataFrame(
                {
                    "t": t,
                    "setup": "s0",
                    "level": 10.0,
                    "rep": 0,
                    "tier": tier,
                    "node": f"{tier}-1",
                    "metric": "cpu_util",
                    "value": value,
                }
            )
        )
    return pl.concat(frames)


#: The three-tier shorthand's call graph: web -> app -> db.
CHAIN = Graph.chain(THREE_TIERS)
WINDOWS = pl.DataFrame(
    {"setup": ["s0"], "level": [10.0], "rep": [0], "t_start": [0.0], "t_end": [STEADY]}
)


def classify(saturated: dict[str, np.ndarray], **options: object) -> dict:
    opts = AnalysisOptions(**options)
    states = window_states(metrics_with(saturated), WINDOWS, opts)
    (entry,) = analyze_bottlenecks(states, opts, graph=CHAIN)
    return entry


def test_single_bottleneck() -> None:
    entry = classify({"db": np.ones(int(STEADY), bool)})
    assert entry["kind"] == "single"
    assert (entry["primary"]["tier"], entry["primary"]["resource"]) == ("db", "cpu")
    assert entry["primary_fraction"] == 1.0 and entry["windows"] == 120


def test_no_bottleneck() -> None:
    assert classify({})["kind"] == "none"


def test_client_limits_throughput() -> None:
    entry = classify({"client": np.ones(120, bool), "db": np.arange(120) % 10 == 0})
    assert entry["kind"] == "client"
    assert entry["primary"]["tier"] == "client"


def test_both_fully_saturated_is_concurrent() -> None:
    entry = classify({"app": np.ones(120, bool), "db": np.ones(120, bool)})
    assert entry["kind"] == "concurrent" and entry["pattern"] == "simultaneous"


def test_independent_partial_bottlenecks_are_concurrent() -> None:
    sat = saturation_series({"app": 0.4, "db": 0.5}, 120, mode="independent", seed=4)
    entry = classify(sat)
    assert entry["kind"] == "concurrent"
    assert entry["pairs"][0]["relation"] == "independent"


def test_alternating_bottlenecks_are_oscillatory() -> None:
    sat = saturation_series({"app": 0.45, "db": 0.45}, 120, mode="alternating", seed=2)
    entry = classify(sat)
    assert entry["kind"] == "oscillatory"
    assert entry["pairs"][0]["relation"] == "alternating"
    assert entry["primary_fraction"] == pytest.approx(float((sat["app"] | sat["db"]).mean()))


def test_the_raw_five_percent_rule_would_call_independent_resources_dependent() -> None:
    # seed 001 §6.3: two independent resources each saturated 10 % of the time overlap ~1 %;
    # Malkowski's P(overlap) <= 5 % calls them dependent, the independence baseline does not
    sat = saturation_series({"a": 0.1, "b": 0.1}, 5000, mode="independent", seed=7)
    dep = dependence(sat["a"], sat["b"], permutations=999, rng=np.random.default_rng(0))
    assert dep["overlap"] <= 0.05  # what the thesis's rule looks at
    assert dep["lift"] == pytest.approx(1.0, abs=0.35)
    assert dep["p_alternating"] > 0.05 and dep["p_together"] > 0.05


def test_together_is_detected() -> None:
    sat = saturation_series({"a": 0.3, "b": 0.3}, 400, mode="together", seed=1)
    dep = dependence(sat["a"], sat["b"], permutations=999, rng=np.random.default_rng(0))
    assert dep["p_together"] < 0.01 and dep["phi"] == pytest.approx(1.0)


THREE_TIER = """
name: capped
stations:
  - {name: web, type: queue, discipline: ps}
  - {name: app, type: queue, discipline: ps}
  - {name: db, type: queue, discipline: fcfs}
classes:
  - name: users
    population: 10
    think_time: 0.1
    demands: {web: %(web)s, app: %(app)s, db: %(db)s}
"""


def capped(web: float, app: float, db: float):
    import yaml

    return parse_model(yaml.safe_load(THREE_TIER % {"web": web, "app": app, "db": db}))


@pytest.mark.parametrize(
    ("demands", "kind", "tiers"),
    [
        ((0.002, 0.004, 0.02), "single", {"db"}),
        ((0.002, 0.02, 0.004), "single", {"app"}),
        ((0.002, 0.02, 0.02), "concurrent", {"app", "db"}),
    ],
    ids=["db-capped", "app-capped", "both-capped"],
)
def test_simulated_capped_tiers(tmp_path: Path, demands: tuple, kind: str, tiers: set) -> None:
    record_simulated_sweep(
        {"s0": capped(*demands)}, tmp_path / "run", levels=[1, 60], steady=30, ramp_up=3
    )
    doc = analyze(read_run(tmp_path / "run"))
    low, high = doc["bottlenecks"]
    assert low["kind"] == "none"
    assert high["kind"] == kind
    assert {r["tier"] for r in high["resources"]} == tiers
    assert high["primary"]["tier"] in tiers and high["primary"]["resource"] == "cpu"


def long_metrics(t: np.ndarray, rows: list[tuple[str, str, np.ndarray]]) -> pl.DataFrame:
    """Samples at times ``t`` of (tier, metric, values) on node ``<tier>-1``, level 10."""
    return pl.concat(
        pl.DataFrame(
            {"t": t, "setup": "s0", "level": 10.0, "rep": 0, "tier": tier,
             "node": f"{tier}-1", "metric": metric, "value": value}
        )
        for tier, metric, value in rows
    )  # fmt: skip


def test_resources_are_ordered_by_role_primary_first() -> None:
    # db cpu saturated; the app's worker and connection pools full because of it (push-back,
    # more often full than the cpu itself); the host's cpu pressure high: readers take the
    # first entry, so the primary comes first whatever the fractions and the names say.
    rng = np.random.default_rng(3)
    t = np.arange(0, STEADY, DT)
    sec = np.floor(t).astype(int)
    db_busy = rng.random(int(STEADY)) < 0.8
    rows = [
        ("db", "cpu_util", np.where(db_busy[sec], 0.99, 0.5)),
        ("app", "pool_util", np.full(t.size, 1.0)),
        ("app", "worker_util", np.full(t.size, 1.0)),
        ("host", "psi_cpu_some", np.full(t.size, 0.9)),
    ]
    metrics = long_metrics(t, rows)
    opts = AnalysisOptions()
    (entry,) = analyze_bottlenecks(window_states(metrics, WINDOWS, opts), opts, graph=CHAIN)
    order = [(r["tier"], r["resource"], r["role"]) for r in entry["resources"]]
    assert entry["kind"] == "single" and entry["primary"]["tier"] == "db"
    assert order[0] == ("db", "cpu", "bottleneck")
    assert [role for *_, role in order] == ["bottleneck", "push-back", "push-back", "host"]


def test_push_back_follows_the_call_graph_not_an_order() -> None:
    # gateway -> catalogue -> catalogue-db, gateway -> orders -> payment: payment's CPU is
    # saturated; orders' pool to it is full (push-back), and so is catalogue's worker pool,
    # which no saturated hardware lies behind: a bottleneck of its own, although catalogue
    # comes before payment front to back.
    graph = Graph.build(
        [
            Component("gateway", calls=(Call("catalogue"), Call("orders", p=0.3))),
            Component("catalogue", calls=(Call("catalogue-db"),)),
            Component("catalogue-db"),
            Component("orders", calls=(Call("payment"),)),
            Component("payment"),
        ],
        "gateway",
    )
    t = np.arange(0, STEADY, DT)
    rows = [
        ("payment", "cpu_util", np.full(t.size, 0.99)),
        ("orders", "pool_util", np.full(t.size, 1.0)),
        ("catalogue", "worker_util", np.full(t.size, 1.0)),
        ("gateway", "cpu_util", np.full(t.size, 0.4)),
    ]
    metrics = long_metrics(t, rows)
    opts = AnalysisOptions()
    (entry,) = analyze_bottlenecks(window_states(metrics, WINDOWS, opts), opts, graph=graph)
    roles = {(r["tier"], r["resource"]): r["role"] for r in entry["resources"]}
    assert roles == {
        ("payment", "cpu"): "bottleneck",
        ("catalogue", "workers"): "bottleneck",
        ("orders", "pool"): "push-back",
    }
    assert entry["kind"] != "single"  # two causes, not one


@pytest.mark.parametrize(
    ("full_pool", "role"), [("payment", "push-back"), ("orders-db", "bottleneck")]
)
def test_a_pool_to_one_callee_is_pushed_back_only_from_that_callee(
    full_pool: str, role: str
) -> None:
    # orders calls payment and orders-db, a pool to each (pool_util:<callee>, and pool_util:
    # the fullest); payment's CPU is saturated. The pool to payment full is push-back; the pool
    # to orders-db full is not explained by payment: a bottleneck of its own (sized too small).
    graph = Graph.build(
        [
            Component("orders", calls=(Call("payment"), Call("orders-db"))),
            Component("payment"),
            Component("orders-db"),
        ],
        "orders",
    )
    t = np.arange(0, STEADY, DT)
    other = "orders-db" if full_pool == "payment" else "payment"
    rows = [
        ("payment", "cpu_util", np.full(t.size, 0.99)),
        ("orders-db", "cpu_util", np.full(t.size, 0.3)),
        ("orders", "pool_util", np.full(t.size, 1.0)),
        ("orders", f"pool_util:{full_pool}", np.full(t.size, 1.0)),
        ("orders", f"pool_util:{other}", np.full(t.size, 0.2)),
    ]
    metrics = long_metrics(t, rows)
    opts = AnalysisOptions()
    (entry,) = analyze_bottlenecks(window_states(metrics, WINDOWS, opts), opts, graph=graph)
    (pool,) = [r for r in entry["resources"] if r["resource"] == "pool"]
    assert (pool["tier"], pool["role"], pool["parts"]) == ("orders", role, [full_pool])
    roles = {(r["tier"], r["resource"]): r["role"] for r in entry["resources"]}
    assert roles[("payment", "cpu")] == "bottleneck"
