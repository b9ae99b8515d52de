"""examples/graph.yaml run for real (issue 16's acceptance): the capped payment component is the
primary bottleneck with orders' pool as its push-back and the gateway not blamed; every request's
path through the graph is recorded, visit by visit, as the spec's calls say; the stalls injected
in catalogue-db are found as millibottlenecks rooted there."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from tierscope.analysis import analyze
from tierscope.experiment import run_experiment
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.experiment import parse_experiment
from tierscope.store import Run, read_run

pytestmark = [pytest.mark.timeout(900), pytest.mark.timing]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graph.yaml"
OPTIONS = AnalysisOptions.parse({"window_s": 0.5})


def run(out: Path, **patch: Any) -> tuple[dict[str, Any], Run]:
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc.update(patch)
    assert run_experiment(parse_experiment(doc), doc, out)["status"] == "complete"
    r = read_run(out)
    return analyze(r, OPTIONS), r


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Run]:
    """Levels 10 (nothing saturates) and 30 (about 0.8 x 30 / 0.5 s = 48 payment visits a
    second wanted, 25 possible), catalogue-db stalled for 0.3 s every 1.53 s (a period that is
    not a multiple of the 50 ms samples)."""
    return run(
        tmp_path_factory.mktemp("graph") / "run",
        sweep={"levels": [10, 30], "repetitions": 1},
        phases={"ramp_up": 2, "steady": 15, "ramp_down": 0.5},
        faults=[
            {"kind": "stall", "tier": "catalogue-db", "at": 2.03, "duration": 0.3,
             "every": 1.53, "until": 17}
        ],
    )  # fmt: skip


def test_capped_payment_is_the_bottleneck_and_orders_pushes_back(
    shop: tuple[dict[str, Any], Run],
) -> None:
    doc, _ = shop
    light, saturated = doc["bottlenecks"]
    assert saturated["primary"]["tier"] == "payment", saturated["primary"]
    assert saturated["primary"]["resource"] == "cpu"
    roles = {(r["tier"], r["resource"]): r["role"] for r in saturated["resources"]}
    assert roles.get(("orders", "pool")) == "push-back", roles
    # the pool that fills is orders' pool to payment, never its pool to orders-db
    (pool,) = [
        r for r in saturated["resources"] if (r["tier"], r["resource"]) == ("orders", "pool")
    ]
    assert pool["parts"] == ["payment"], pool
    for level in (light, saturated):
        blamed = [r["tier"] for r in level["resources"] if r["role"] == "bottleneck"]
        assert "gateway" not in blamed, level


def test_each_pool_to_a_callee_is_measured_on_its_own(shop: tuple[dict[str, Any], Run]) -> None:
    # orders holds 4 connections to each of payment and orders-db: at level 30 the calls to the
    # saturated payment hold every connection to it and more wait for one; the pool to
    # orders-db is not full. A pool's utilisation is connections in use / its size, never above 1.
    _, r = shop
    m = r.metrics.filter(pl.col("tier") == "orders")
    t_start, t_end = r.points.filter(pl.col("level") == 30).select("t_start", "t_end").row(0)
    busy = m.filter(pl.col("t").is_between(t_start, t_end))

    def mean(metric: str) -> float:
        return float(busy.filter(pl.col("metric") == metric)["value"].mean())

    assert m.filter(pl.col("metric").str.starts_with("pool_util"))["value"].max() <= 1.0
    assert mean("pool_util:payment") > 0.9
    assert mean("pool_util:orders-db") < 0.9
    assert mean("pool_waiting:payment") > 1.0  # calls queue for a connection to payment
    assert mean("pool_waiting:orders-db") < mean("pool_waiting:payment") / 4
    assert r.points.filter(pl.col("level") == 30)["orders.pool_util:payment"][0] > 0.9


def test_every_request_path_follows_the_call_graph(shop: tuple[dict[str, Any], Run]) -> None:
    _, r = shop
    # the requests that began and ended in a steady window (all their visits are recorded)
    steady = pl.any_horizontal(
        pl.col("start").is_between(a, b) & pl.col("end").is_between(a, b)
        for a, b in r.points.select("t_start", "t_end").rows()
    )
    done = r.requests.filter(pl.col("tier") == "client", pl.col("status") == "ok", steady)
    visits = r.requests.filter(
        pl.col("tier") != "client", pl.col("request_id").is_in(done["request_id"].implode())
    )
    assert (visits["status"] == "ok").all()
    by_id = {v: t for v, t in visits.select("visit", "tier").iter_rows()}
    # every visit's parent is a visit of a component that calls it; the entry has none
    callers = {"gateway": None, "catalogue": "gateway", "orders": "gateway",
               "catalogue-db": "catalogue", "payment": "orders", "orders-db": "orders"}  # fmt: skip
    for tier, parent in visits.select("tier", "parent").iter_rows():
        assert by_id.get(parent) == callers[tier], (tier, parent)
    per_request = visits.group_by("request_id").agg(
        (pl.col("tier") == t).sum().alias(t) for t in callers
    )
    done = per_request.filter(pl.col("gateway") == 1)
    assert done.height > 200
    assert (done["catalogue"] == 1).all() and (done["catalogue-db"] == 1).all()
    # orders is called with p 0.8: within four standard deviations of the binomial
    n = done.height
    share = float((done["orders"] == 1).sum()) / n
    assert abs(share - 0.8) < 4 * (0.8 * 0.2 / n) ** 0.5, share
    # the gateway calls in sequence (orders after catalogue ended), orders in parallel (its
    # database is called without waiting for payment, which ends later: it queues for its
    # tenth of a core and, before that, for one of orders' 4 connections to it)
    t = visits.select("visit", "parent", "tier", "start", "end")
    kids = t.join(t, left_on="parent", right_on="visit", suffix="_p").drop("parent_p")
    gw = (
        kids.filter(pl.col("tier_p") == "gateway")
        .pivot("tier", index="parent", values=["start", "end"], aggregate_function="first")
        .drop_nulls()
    )
    assert (gw["start_orders"] >= gw["end_catalogue"]).all()
    fan = (
        kids.filter(pl.col("tier_p") == "orders")
        .pivot("tier", index="parent", values=["start", "end"], aggregate_function="first")
        .drop_nulls()
    )
    assert fan.height > 100
    together = (fan["start_orders-db"] < fan["end_payment"]).mean()
    assert together > 0.9, together


def test_stalls_in_catalogue_db_are_rooted_there(shop: tuple[dict[str, Any], Run]) -> None:
    doc, r = shop
    stalls = r.events.filter(pl.col("kind") == "stall").select("t_start", "t_end").rows()
    rooted = [
        (e["start"], e["end"])
        for e in doc["episodes"]
        if e["kind"] == "millibottleneck" and e["root_tier"] == "catalogue-db"
    ]

    def overlaps(a: tuple[float, float], b: tuple[float, float], slack: float = 0.1) -> bool:
        return a[0] < b[1] + slack and b[0] < a[1] + slack

    def found(within: list[tuple[float, float]]) -> int:
        return sum(any(overlaps(s, e) for e in rooted) for s in within)

    # A stall is felt when it held requests: two or more end-to-end requests in flight during
    # it took 0.15 s (half the stall) or more. At light load some stalls hold none (at level
    # 10, 16 requests/s, no request may reach the catalogue's database in 0.3 s: measured, 2
    # to 60 ms of delay and no queue), and there is nothing to find. Of the felt stalls the
    # issue's 90 % must be found rooted at catalogue-db, at level 30 and in all (beside a CPU
    # hog too). CI once saw 5 of 10 at level 10: the gateway, every user's request inside it,
    # fell silent during a stall and was taken for paused (the shallowest of two frozen tiers
    # won); a tier whose callees hold requests now waits for them. The bounds fail when roots
    # are wrong (none found).
    client = r.requests.filter(pl.col("tier") == "client").select("start", "end")

    def felt(s: tuple[float, float]) -> bool:
        held = client.filter(
            (pl.col("start") < s[1])
            & (pl.col("end") > s[0])
            & (pl.col("end") - pl.col("start") >= 0.15)
        )
        return held.height >= 2

    busy = r.points.filter(pl.col("level") == 30).select("t_start", "t_end").row(0)
    loaded = [s for s in stalls if busy[0] <= s[0] and s[1] <= busy[1] and felt(s)]
    held = [s for s in stalls if felt(s)]
    assert len(stalls) >= 18 and len(loaded) >= 7 and len(held) >= 0.7 * len(stalls), (
        stalls, held, busy
    )  # fmt: skip
    assert found(loaded) >= 0.9 * len(loaded), (found(loaded), loaded, rooted)
    assert found(held) >= 0.9 * len(held), (found(held), held, rooted)
    # and the episodes rooted there are the stalls, not noise blamed on it
    true = sum(any(overlaps(e, s) for s in stalls) for e in rooted)
    assert true >= 0.9 * len(rooted), (rooted, stalls)
