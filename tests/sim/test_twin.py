"""The steppable twin: replicas and quotas changed while it runs, against closed forms.

Saturated tiers serve quota / demand requests per second per replica (the CFS budget is the
only limit), so a change of capacity shows up as a step in throughput of exactly that size.
"""

from __future__ import annotations

import numpy as np
import pytest

from tierscope.sim.twin import SimTier, Twin, TwinSystem

#: 4,000 requests' CPU seconds, uniform from 5 to 15 ms (not constant: requests of equal size
#: that enter a processor-sharing server together leave together, and the next server in a
#: chain then idles between such batches), and what a saturated replica at 0.5 core serves.
DEMANDS = np.random.default_rng(11).uniform(0.005, 0.015, size=(4000, 1))
ONE = 0.5 / float(DEMANDS.mean())


def _saturated(replicas: int, most: int, quota: float = 0.5, write: float | None = None) -> Twin:
    """200 users with 1 ms of think time in front of one tier: always busy."""
    tier = SimTier("app", replicas, 1.0, quota, write_all=write is not None)
    system = TwinSystem(
        tiers=[tier],
        think_time=0.001,
        demand_means=DEMANDS.mean(axis=0),
        demand_samples=DEMANDS,
        write_fraction=None if write is None else np.full(len(DEMANDS), write),
        max_replicas=[most],
    )
    return Twin(system, users=200, seed=3)


def _rate(step, a: float, b: float) -> float:  # type: ignore[no-untyped-def]
    done = step.done
    return float(((done >= a) & (done < b)).sum()) / (b - a)


def test_a_replica_added_mid_run_serves_after_its_start_up_delay() -> None:
    twin = _saturated(1, 3)
    first = twin.advance(60.0)
    # The controller decides at 60 s; the replica is up 15 s later.
    twin.scale("app", 2, at=60.0 + 15.0)
    assert twin.replicas("app") == 2
    second = twin.advance(150.0)
    one, two = ONE, 2 * ONE
    assert _rate(first, 10, 60) == pytest.approx(one, rel=0.03)
    assert _rate(second, 61, 75) == pytest.approx(one, rel=0.04)
    assert _rate(second, 76, 150) == pytest.approx(two, rel=0.03)
    # Down to one at 150 s: the stopped replica finishes what it holds, then uses no CPU.
    twin.scale("app", 1, at=150.0)
    third = twin.advance(200.0)
    assert _rate(third, 152, 200) == pytest.approx(one, rel=0.03)
    stopped = twin.layout.replicas[0][1]
    after = third.t_start >= 152
    assert third.station_cpu[after, stopped].sum() == 0.0
    assert third.cpu[after, 0].sum() / (200 - 152) == pytest.approx(0.5, rel=0.01)


def test_a_quota_changed_mid_run_and_changes_that_cannot_be() -> None:
    twin = _saturated(2, 2)
    twin.set_quota("app", 0.2, at=50.0)
    step = twin.advance(100.0)
    assert _rate(step, 10, 50) == pytest.approx(2 * ONE, rel=0.03)
    assert _rate(step, 51, 100) == pytest.approx(2 * ONE * 0.2 / 0.5, rel=0.03)
    assert step.throttled[step.t_start >= 51].sum() == pytest.approx(
        step.periods[step.t_start >= 51].sum()
    )
    with pytest.raises(ValueError, match="room for 1 to 2"):
        twin.scale("app", 3, at=100.0)
    with pytest.raises(ValueError, match="before the simulation's time"):
        twin.scale("app", 1, at=20.0)
    twin.scale("app", 1, at=130.0)
    with pytest.raises(ValueError, match="before the one at 130"):
        twin.scale("app", 2, at=120.0)
    with pytest.raises(ValueError, match="no tier 'db'"):
        twin.set_quota("db", 0.5, at=120.0)


def _cpu(step, a: float, b: float) -> float:  # type: ignore[no-untyped-def]
    """Cores the tier used over [a, b) (whole windows)."""
    inside = (step.t_start >= a) & (step.t_start < b)
    return float(step.cpu[inside, 0].sum()) / float(inside.sum() * step.window)


def test_writes_run_at_every_active_replica_as_replicas_come_and_go() -> None:
    """Reads spread over the replicas: the tier serves replicas x what one serves. A write runs
    at every active replica (one after the other), so the tier's CPU is replicas x the writes'
    CPU (flow conservation, whatever the queueing), and the throughput stays at most what one
    replica serves (a little less: a replica now and then idles waiting for writes from the
    one before it)."""
    reads, writes = _saturated(2, 3, quota=0.2, write=0.0), _saturated(2, 3, quota=0.2, write=1.0)
    one = ONE * 0.2 / 0.5
    d = float(DEMANDS.mean())
    for twin in (reads, writes):
        twin.scale("app", 3, at=100.0)
    r, w = reads.advance(250.0), writes.advance(250.0)
    for (a, b), replicas in (((10, 100), 2), ((101, 250), 3)):
        assert _rate(r, a, b) == pytest.approx(replicas * one, rel=0.03)
        x = _rate(w, a, b)
        assert 0.85 * one < x <= 1.01 * one
        assert _cpu(w, a, b) == pytest.approx(replicas * x * d, rel=0.02)
