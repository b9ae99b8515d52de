"""Complete information: exact processor-sharing attribution, measured-CPU attribution, nesting."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tierscope.estimate import CI, Observations, RequestRecords
from tierscope.estimate._run import cpu_intervals, exclusive_segments
from tierscope.estimate.ci import _cpu_share, _ps_share, segment_demands


def test_ps_share_by_hand() -> None:
    # A alone on [0,1), A and B on [1,3) (1/2 each), B alone on [3,4): A=2, B=2
    got = _ps_share(np.array([0.0, 1.0]), np.array([3.0, 4.0]), servers=1)
    np.testing.assert_allclose(got, [2.0, 2.0])
    # two servers: both at full speed while together
    got = _ps_share(np.array([0.0, 1.0]), np.array([3.0, 4.0]), servers=2)
    np.testing.assert_allclose(got, [3.0, 3.0])


def test_cpu_share_follows_measured_cpu_not_presence() -> None:
    """A request present for 1 s while the node used 0.2 cores (throttled) is charged 0.2 s."""
    cpu = pl.DataFrame({"t_start": [0.0, 0.5, 1.0], "t_end": [0.5, 1.0, 1.5], "cores": [0.2] * 3})
    got = _cpu_share(np.array([0.0, 0.5]), np.array([1.0, 1.5]), cpu)
    # [0,0.5): A alone 0.1; [0.5,1): A and B share 0.1; [1,1.5): B alone 0.1
    np.testing.assert_allclose(got, [0.15, 0.15])
    # CPU in a gap between intervals is nobody's; a request outside all intervals gets 0
    got = _cpu_share(np.array([2.0]), np.array([3.0]), cpu)
    np.testing.assert_allclose(got, [0.0])


def test_exclusive_segments_cut_out_the_next_tier() -> None:
    req = pl.DataFrame(
        {
            "tier": ["web", "app", "db", "db", "web"],
            "request_id": ["r1", "r1", "r1", "r1", "r2"],
            "node": ["web-1", "app-1", "db-1", "db-1", "web-1"],
            "start": [0.0, 0.1, 0.2, 0.5, 1.0],
            "end": [1.0, 0.9, 0.3, 0.6, 1.2],
        }
    )
    seg = exclusive_segments(req, ("web", "app", "db")).sort("station", "request", "start")
    web = seg.filter(pl.col("station") == "web")
    assert web.select("request", "start", "end").rows() == [
        ("r1", 0.0, 0.1),
        ("r1", 0.9, 1.0),
        ("r2", 1.0, 1.2),
    ]
    app = seg.filter(pl.col("station") == "app")
    assert app.select("start", "end").rows() == [(0.1, 0.2), (0.3, 0.5), (0.6, 0.9)]
    assert seg.filter(pl.col("station") == "db").height == 2


def test_exclusive_segments_of_a_call_graph_cut_out_each_visits_calls() -> None:
    """gateway calls catalogue, then orders; orders calls payment and orders-db in parallel
    (overlapping calls are cut out once); a second request skips orders."""
    rows = [  # tier, request, visit, parent, start, end
        ("gateway", "r1", "g1", None, 0.0, 10.0),
        ("catalogue", "r1", "c1", "g1", 1.0, 3.0),
        ("orders", "r1", "o1", "g1", 4.0, 9.0),
        ("payment", "r1", "p1", "o1", 5.0, 8.0),
        ("orders-db", "r1", "d1", "o1", 6.0, 7.0),
        ("gateway", "r2", "g2", None, 20.0, 22.0),
        ("catalogue", "r2", "c2", "g2", 20.5, 21.0),
    ]
    req = pl.DataFrame(
        rows, schema=["tier", "request_id", "visit", "parent", "start", "end"], orient="row"
    ).with_columns(pl.col("tier").alias("node"))
    seg = exclusive_segments(req, ("gateway", "catalogue", "orders", "payment", "orders-db"))
    got = {
        (st, r): sorted(zip(p["start"], p["end"], strict=True))
        for (st, r), p in seg.group_by("station", "request")
    }
    assert got == {
        ("gateway", "r1"): [(0.0, 1.0), (3.0, 4.0), (9.0, 10.0)],
        ("catalogue", "r1"): [(1.0, 3.0)],
        ("orders", "r1"): [(4.0, 5.0), (8.0, 9.0)],
        ("payment", "r1"): [(5.0, 8.0)],
        ("orders-db", "r1"): [(6.0, 7.0)],
        ("gateway", "r2"): [(20.0, 20.5), (21.0, 22.0)],
        ("catalogue", "r2"): [(20.5, 21.0)],
    }


def test_cpu_intervals_cover_the_time_since_the_previous_sample() -> None:
    cpu = pl.DataFrame(
        {
            "tier": ["db"] * 3,
            "node": ["db-1"] * 3,
            "t": [0.05, 0.10, 0.15],
            "value": [0.1, 0.2, 0.3],
        }
    )
    iv = cpu_intervals(cpu, ("db",))
    assert iv["t_start"].to_list() == pytest.approx([0.0, 0.05, 0.10])
    assert iv["t_end"].to_list() == pytest.approx([0.05, 0.10, 0.15])


def test_a_cpu_sample_after_a_gap_covers_a_few_of_its_own_steps_only() -> None:
    """A setup's next level after other setups' (interleaved): its first sample is not the
    mean of the gap. Each node keeps its own step (the client's 0.25 s, a node's 0.05 s)."""
    cpu = pl.DataFrame(
        {
            "tier": ["db"] * 6 + ["client"] * 3,
            "node": ["db-1"] * 6 + ["client"] * 3,
            "t": [0.05, 0.10, 0.15, 30.05, 30.10, 30.15, 0.25, 0.5, 30.25],
            "value": [0.1] * 9,
        }
    )
    iv = cpu_intervals(cpu, ("db", "client")).sort("station", "t_end")
    db = iv.filter(pl.col("station") == "db")
    assert db["t_start"].to_list() == pytest.approx([0.0, 0.05, 0.10, 29.85, 30.05, 30.10])
    client = iv.filter(pl.col("station") == "client")
    assert client["t_start"].to_list() == pytest.approx([0.0, 0.25, 29.25])


def test_ci_sums_a_requests_segments_and_counts_requests_that_skip_a_station() -> None:
    records = RequestRecords(
        requests=pl.DataFrame({"request": ["r1", "r2", "r3"], "cls": ["a", "a", "b"]}),
        segments=pl.DataFrame(
            {
                "station": ["s", "s", "s"],
                "node": ["n", "n", "n"],
                "request": ["r1", "r1", "r3"],
                "start": [0.0, 2.0, 5.0],
                "end": [1.0, 2.5, 5.4],
            }
        ),
        servers={("s", "n"): 1.0},
    )
    np.testing.assert_allclose(segment_demands(records), [1.0, 0.5, 0.4])
    obs = Observations(
        classes=("a", "b"),
        stations=("s",),
        throughput=np.ones((2, 2)),
        servers=np.ones(1),
        records=records,
    )
    est = CI(n_boot=20).fit(obs)
    # class a: r1 used 1.5 s, r2 never came: mean 0.75
    np.testing.assert_allclose(est.demands_, [[0.75, 0.4]])
    assert est.request_demands_.height == 3
