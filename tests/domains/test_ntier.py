"""The n-tier model: facts from specs, the product-form model file, the quota-aware simulator
against closed forms, exact MVA and CFS arithmetic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tierscope.domains.ntier import (
    KERNEL_TICK_S,
    HostModel,
    NTierModel,
    TierFacts,
    TierModel,
    default_processes,
    predict,
    replica_rates,
    tier_facts,
)
from tierscope.experiment.targets.embedded import processes_for
from tierscope.qn import Network, solve
from tierscope.sim.twin import SimTier, simulate_closed
from tierscope.spec.experiment import TierSpec, parse_experiment


@pytest.mark.parametrize("cpu", [None, 0.2, 0.8, 1.0, 1.5, 2.4])
def test_processes_follow_the_runners_rule(cpu: float | None) -> None:
    spec = TierSpec(cpu=cpu)
    assert default_processes(spec) == processes_for(spec)


def test_tier_facts_from_a_spec() -> None:
    spec = parse_experiment(
        {
            "system": {"topology": "1/2/1", "tiers": {"app": {"cpu": 1.5}, "db": {"cpu": 0.2}}},
            "sweep": {"levels": [1]},
        }
    )
    f = tier_facts(spec)
    assert f["app"] == TierFacts("app", 2, 1.5, 2, quantum=0.005, tick=None)
    assert f["app"].capacity == pytest.approx(3.0)
    assert f["db"].capacity == pytest.approx(0.2)
    assert f["web"].cpu is None and f["web"].capacity == 1.0


def test_embedded_tiers_are_throttled_at_once_other_servers_at_the_tick() -> None:
    """The embedded tiers burn CPU reading their own CPU clock, which makes the kernel account
    their runtime at every read; other servers are accounted at the tick."""
    graph = {"gateway": {"calls": [{"to": "payment"}]}, "payment": {"cpu": 0.1}}
    attached = {"gateway": graph["gateway"] | {"pid": 1, "url": "http://127.0.0.1:1/"},
                "payment": {"pid": 2}}  # fmt: skip
    for kind, components, tick in (("embedded", graph, None), ("attach", attached, KERNEL_TICK_S)):
        system = {"kind": kind, "entry": "gateway", "components": components}
        spec = parse_experiment({"system": system, "sweep": {"levels": [1]}, "faults": []})
        assert {f.tick for f in tier_facts(spec).values()} == {tick}, kind
    three = parse_experiment({"system": {"topology": "1/1/1"}, "sweep": {"levels": [1]}})
    assert {f.tick for f in tier_facts(three).values()} == {None}


def test_an_overrun_is_noticed_at_the_next_tick_or_at_once() -> None:
    """6 ms requests, 5 ms of budget per period, previous periods idle. Accounted at once, a
    request is throttled after 5 ms and ends 1 ms into the next period unless it started in
    the last 5 ms of one. At 4 ms ticks (on the period's grid), the spent budget is noticed at
    the first tick after it ran out: the request completes first unless that tick falls within
    the 1 ms it still needs, a quarter of the start offsets."""

    def throttled(tick: float | None) -> float:
        out = _one_user(0.006, SimTier("db", 1, 1.0, 0.05, tick=tick), think_time=0.5,
                        warmup=0.0, duration=400, trace=True)  # fmt: skip
        assert out.trace is not None
        req = np.array([(s, e) for _, s, e in out.trace.requests])
        rested = (req[1:, 0] - req[:-1, 1]) >= 0.2
        rt = (req[1:, 1] - req[1:, 0])[rested]
        assert rt.size > 400
        return float(np.mean(rt > 0.0061))

    assert throttled(None) == pytest.approx(0.95, abs=0.04)
    assert throttled(0.004) == pytest.approx(0.25 * 0.95, abs=0.06)


def test_replica_rates_spread_jobs_over_replicas() -> None:
    # two replicas of 2 processes with 1.5 cores each: alpha(j) = 1, 2, 2.5, 3 for j = 1..4
    tier = TierModel(TierFacts("app", 2, 1.5, 2), demand=0.01)
    r = replica_rates(tier)
    alpha = [min(j, 2) * r[min(j, len(r)) - 1] for j in range(1, 6)]
    assert alpha == pytest.approx([1.0, 2.0, 2.5, 3.0, 3.0])
    # a quota below one core: every job count gets the quota
    assert replica_rates(TierModel(TierFacts("db", 1, 0.2, 1), 0.01)) == pytest.approx([0.2])


def _model(
    cpu: dict[str, float | None], demand: dict[str, float], think: float = 0.5
) -> NTierModel:
    tiers = tuple(
        TierModel(TierFacts(t, 1, cpu[t], default_processes(TierSpec(cpu=cpu[t]))), demand[t])
        for t in ("web", "app", "db")
    )
    return NTierModel(tiers=tiers, think_time=think)


def test_the_model_file_is_the_product_form_reading_of_the_quotas() -> None:
    model = _model({"web": 0.5, "app": 0.8, "db": 0.2}, {"web": 3e-4, "app": 1.3e-3, "db": 1.6e-3})
    doc = model.to_model(200)
    sol = solve(Network.from_model(doc), "exact")
    # saturated: the db station serves 0.2 cores of work -> X = 0.2 / D_db
    assert sol.throughput[0] == pytest.approx(0.2 / 1.6e-3, rel=1e-3)
    assert model.max_throughput == pytest.approx(125.0)
    assert model.bottleneck() == "db"


def test_simulation_without_quotas_agrees_with_exact_mva() -> None:
    model = _model(
        {"web": None, "app": None, "db": None}, {"web": 2e-3, "app": 6e-3, "db": 8e-3}, think=0.2
    )
    for users in (5, 40):
        exact = predict(model, [users], solver="mva")[0]
        sim = predict(model, [users], solver="quota-sim", duration=600, seed=2)[0]
        assert sim.throughput == pytest.approx(exact.throughput, rel=0.02)
        assert sim.rt_mean == pytest.approx(exact.rt_mean, rel=0.05)


def test_a_quota_caps_throughput_at_quota_over_demand() -> None:
    tiers = [SimTier("db", 1, 1.0, 0.2)]
    out = simulate_closed(
        tiers, users=60, think_time=0.1, demand_means=np.array([2e-3]), duration=200, seed=3
    )
    assert out.throughput == pytest.approx(0.2 / 2e-3, rel=0.02)
    assert out.utilization["db"] == pytest.approx(0.2, rel=0.01)


def test_below_the_budget_a_quota_does_not_slow_a_request_down() -> None:
    """One user, 1 ms of CPU per request, 20 ms of budget per period: every request runs at
    full speed (R = D); the product-form reading would say D / q = 5 ms."""
    tiers = [SimTier("db", 1, 1.0, 0.2)]
    out = simulate_closed(
        tiers,
        users=1,
        think_time=0.3,
        demand_means=np.array([1e-3]),
        demand_samples=np.array([[1e-3]]),
        duration=100,
    )
    np.testing.assert_allclose(out.response_times, 1e-3, rtol=1e-9)


def test_a_request_larger_than_the_budget_waits_for_the_next_periods() -> None:
    """50 ms of CPU with 20 ms of budget per 100 ms. Arriving at offset φ of a period with a
    full budget it runs 20 ms (or to the period's end), then 20 ms in the next period, then the
    rest in the third: R = 210 ms - φ for φ <= 80 ms and 130 ms beyond, so never below 130 ms;
    arriving with part of the budget already used costs at most one period more."""
    tiers = [SimTier("db", 1, 1.0, 0.2)]
    out = simulate_closed(
        tiers,
        users=1,
        think_time=1.0,
        demand_means=np.array([0.05]),
        demand_samples=np.array([[0.05]]),
        duration=300,
    )
    rt = out.response_times
    assert rt.min() == pytest.approx(0.13, abs=1e-9)
    assert np.all(rt >= 0.13 - 1e-9) and np.all(rt <= 0.31)


def test_writes_run_at_every_replica_of_the_last_tier() -> None:
    tiers = [SimTier("db", 2, 1.0, 0.2, write_all=True)]
    kw = dict(users=80, think_time=0.1, demand_means=np.array([2e-3]), duration=150, seed=4)
    samples = np.array([[2e-3]])
    reads = simulate_closed(tiers, demand_samples=samples, write_fraction=np.array([0.0]), **kw)
    writes = simulate_closed(tiers, demand_samples=samples, write_fraction=np.array([1.0]), **kw)
    assert reads.throughput == pytest.approx(2 * 0.2 / 2e-3, rel=0.03)
    assert writes.throughput == pytest.approx(0.2 / 2e-3, rel=0.03)


def test_traces_account_for_every_cpu_second() -> None:
    tiers = [SimTier("app", 1, 1.0, 0.5), SimTier("db", 1, 1.0, 0.2)]
    out = simulate_closed(
        tiers,
        users=20,
        think_time=0.2,
        demand_means=np.array([1e-3, 2e-3]),
        warmup=0.0,
        duration=30,
        trace=True,
    )
    assert out.trace is not None
    cpu = np.array(out.trace.cpu)
    for k, name in enumerate(("app", "db")):
        used = cpu[cpu[:, 0] == k, 3].sum() * 0.05
        assert used == pytest.approx(out.utilization[name] * out.simulated, rel=0.01)
    visits = np.array(out.trace.visits)
    assert np.all(visits[:, 4] >= visits[:, 3])


@pytest.mark.parametrize(
    ("quantum", "deterministic"), [(float("inf"), False), (1e-4, True), (0.005, False)]
)
def test_round_robin_agrees_with_exact_mva_where_theory_says_so(
    quantum: float, deterministic: bool
) -> None:
    """FCFS (an infinite slice) with exponential demands is product form; round robin with a
    tiny slice is processor sharing, whose mean is insensitive to the demand distribution; an
    exponential demand is memoryless, so any slice gives the same means as well."""
    D, Z, users = 4e-3, 0.05, 15
    model = NTierModel(tiers=(TierModel(TierFacts("db", 1, None, 1, quantum), D),), think_time=Z)
    exact = predict(model, [users], solver="mva")[0]
    out = simulate_closed(
        [SimTier("db", 1, 1.0, None, quantum=quantum)],
        users=users,
        think_time=Z,
        demand_means=np.array([D]),
        demand_samples=np.array([[D]]) if deterministic else None,
        duration=400,
        seed=5,
    )
    assert out.throughput == pytest.approx(exact.throughput, rel=0.02)
    assert out.rt_mean == pytest.approx(exact.rt_mean, rel=0.06)


def _one_user(demand: float, tier: SimTier, **kw: object):
    return simulate_closed(
        [tier],
        users=1,
        think_time=kw.pop("think_time", 0.37),  # type: ignore[arg-type]
        demand_means=np.array([demand]),
        demand_samples=np.array([[demand]]),
        **kw,  # type: ignore[arg-type]
    )


def test_unused_budget_carried_over_lets_a_request_exceed_one_periods_quota() -> None:
    """21 ms of CPU, 20 ms of budget per period, the previous periods idle. With the kernel's
    1 ms carried over, every request runs straight through (R = 21 ms). Without it, a request
    starting at offset φ < 80 ms of a period is throttled after 20 ms and ends 1 ms into the
    next period (R = 101 ms - φ); only from φ = 80 ms on do its two parts fit in two budgets
    (about 20 % of the offsets)."""

    def rested(tier: SimTier) -> np.ndarray:
        """Response times of the requests sent 200 ms or more after the previous one ended
        (so their period and the one before started with no budget used)."""
        out = _one_user(0.021, tier, think_time=0.5, warmup=0.0, duration=300, trace=True)
        assert out.trace is not None
        req = np.array([(s, e) for _, s, e in out.trace.requests])
        idle = req[1:, 0] - req[:-1, 1]
        rt = req[1:, 1] - req[1:, 0]
        return rt[idle >= 0.2]

    carry = rested(SimTier("db", 1, 1.0, 0.2, carry=0.001))
    plain = rested(SimTier("db", 1, 1.0, 0.2))
    assert carry.size > 300 and plain.size > 300
    np.testing.assert_allclose(carry, 0.021, rtol=0, atol=1e-9)
    straight = np.isclose(plain, 0.021, rtol=0, atol=1e-9)
    assert 0.1 < straight.mean() < 0.3
    phase = 0.101 - plain[~straight]  # offset φ of the throttled ones
    assert np.all((phase >= -1e-9) & (phase < 0.080 + 1e-9))


def test_carry_over_does_not_raise_the_long_run_capacity() -> None:
    tiers = [SimTier("db", 1, 1.0, 0.2, carry=0.001)]
    out = simulate_closed(
        tiers, users=60, think_time=0.1, demand_means=np.array([2e-3]), duration=200, seed=3
    )
    assert out.utilization["db"] == pytest.approx(0.2, rel=0.01)


def test_throttled_fraction_counts_periods_like_the_kernel() -> None:
    """Overloaded: every period in which the replica runs ends throttled; 1 ms requests of
    one user never meet the 20 ms budget; no quota, no statistic."""
    over = simulate_closed(
        [SimTier("db", 1, 1.0, 0.2)],
        users=60,
        think_time=0.1,
        demand_means=np.array([2e-3]),
        duration=60,
    )
    assert over.throttled["db"] == pytest.approx(1.0, abs=0.01)
    light = _one_user(1e-3, SimTier("db", 1, 1.0, 0.2), duration=60)
    assert light.throttled["db"] == 0.0
    free = _one_user(1e-3, SimTier("db", 1, 1.0, None), duration=10)
    assert free.throttled == {}


def test_a_stalled_replica_runs_nothing_until_the_stall_ends() -> None:
    """Stalls from 0.5 to 0.8 s of every second: a 1 ms request (one user, no quota) that
    arrives in a stall ends 1 ms after it, one that arrives in the last 1 ms before a stall
    ends 0.3 s later than it would have; the others take their 1 ms."""
    out = _one_user(
        1e-3,
        SimTier("app", 1, 1.0, None),
        think_time=0.05,
        warmup=0.0,
        duration=20,
        stalls=[(0, None, 0.5, 0.8)],
        stall_cycle=1.0,
        trace=True,
    )
    assert out.trace is not None
    req = np.array([(s, e) for _, s, e in out.trace.requests])
    phase = req[:, 0] % 1.0
    stalled = (phase >= 0.5) & (phase < 0.8)
    assert stalled.sum() > 15 and (~stalled).sum() > 200  # one request is caught per stall
    caught = (phase >= 0.499) & (phase < 0.5)
    free = ~stalled & ~caught
    np.testing.assert_allclose(req[stalled, 1], np.floor(req[stalled, 0]) + 0.801, atol=1e-9)
    np.testing.assert_allclose(req[caught, 1] - req[caught, 0], 0.301, atol=1e-9)
    np.testing.assert_allclose(req[free, 1] - req[free, 0], 1e-3, atol=1e-9)


@pytest.mark.parametrize("quantum", [None, 0.005])
def test_contention_is_a_load_dependent_station_that_exact_mva_solves(
    quantum: float | None,
) -> None:
    """A server that burns 1 + c (min(n, upto) - 1) times a request's CPU with n requests
    present is a load-dependent station of rate 1 / slowdown(n): with exponential demands its
    queue is the same birth-death process in processor sharing and in round robin, which exact
    MVA with those rates solves (a second method, sharing nothing with the simulator)."""
    D, Z, c, upto = 4e-3, 0.05, 0.1, 6.0
    tier = TierModel(TierFacts("db", 1, None, 1, quantum), D, contention=c, contention_upto=upto)
    model = NTierModel(tiers=(tier,), think_time=Z)
    # (from upto on the rate stays: the list ends there)
    assert replica_rates(tier) == pytest.approx([1 / (1 + c * (j - 1)) for j in range(1, 7)])
    for users in (4, 30):
        exact = predict(model, [users], solver="mva")[0]
        sim = predict(model, [users], solver="quota-sim", duration=400, seed=4)[0]
        assert sim.throughput == pytest.approx(exact.throughput, rel=0.02)
        assert sim.rt_mean == pytest.approx(exact.rt_mean, rel=0.06)
    # saturated, the server serves 1 / (D (1 + c (upto - 1))) requests per second
    assert model.max_throughput == pytest.approx(1 / (D * 1.5))
    assert exact.throughput == pytest.approx(model.max_throughput, rel=0.01)


def test_contention_spends_the_quota_on_the_slowdown() -> None:
    """Under a quota the budget is CPU time: with 10 requests always present and contention
    up to 5, each request costs D (1 + 4 c) of it, so throughput is quota / that."""
    D, c = 2e-3, 0.05
    out = simulate_closed(
        [SimTier("db", 1, 1.0, 0.2, quantum=0.005, contention=c, contention_upto=5.0)],
        users=10,
        think_time=0.0,
        demand_means=np.array([D]),
        demand_samples=np.array([[D]]),
        duration=200,
        seed=3,
    )
    assert out.throughput == pytest.approx(0.2 / (D * (1 + 4 * c)), rel=0.01)
    assert out.utilization["db"] == pytest.approx(0.2, rel=0.01)


# ---- the host's cores shared with other processes ------------------------------------------------
def _tiers(n: int) -> list[SimTier]:
    quotas = (("web", 0.5), ("app", 0.8), ("db", 0.2))[-n:]
    return [SimTier(t, 1, 1.0, q, quantum=0.005) for t, q in quotas]


@pytest.mark.parametrize(("n_tiers", "cores", "background"), [(2, 2.0, 0.0), (3, 64.0, 3.0)])
def test_a_host_with_cores_to_spare_changes_nothing(
    n_tiers: int, cores: float, background: float
) -> None:
    """Two one-process tiers and no other process on 2 cores, or three tiers beside 3 tasks of
    other processes on 64 cores: a running task never lacks a core, so the simulation is the
    one without a host, request for request."""
    means = np.array([3e-4, 1.3e-3, 1.8e-3])[-n_tiers:]
    kw = dict(users=40, think_time=0.2, demand_means=means, duration=60, seed=7)
    free = simulate_closed(_tiers(n_tiers), **kw)  # type: ignore[arg-type]
    shared = simulate_closed(
        _tiers(n_tiers),
        host_cores=cores,
        host_background=background,
        **kw,  # type: ignore[arg-type]
    )
    assert free.response_times.size > 1000
    np.testing.assert_array_equal(shared.response_times, free.response_times)
    assert shared.throttled == free.throttled
    assert shared.host_share == 1.0
    # busy cores on the host: the tiers' and the other processes'
    assert shared.host_busy == pytest.approx(sum(free.utilization.values()) + background, rel=1e-3)


@pytest.mark.parametrize(("cores", "background"), [(2.0, 0.5), (2.0, 1.5), (2.0, 3.0), (1.0, 1.0)])
def test_one_task_beside_background_tasks_runs_at_its_fair_share(
    cores: float, background: float
) -> None:
    """One user, 4 ms of CPU per request, no quota: with b tasks of other processes on C cores
    the request's task gets min(1, C / (b + 1)) of a core, so R = 4 ms / that, exactly."""
    share = min(1.0, cores / (background + 1.0))
    out = _one_user(
        4e-3,
        SimTier("app", 1, 1.0, None, quantum=0.005),
        duration=60,
        host_cores=cores,
        host_background=background,
    )
    np.testing.assert_allclose(out.response_times, 4e-3 / share, rtol=1e-9)
    assert out.host_share == pytest.approx(share)
    # the other processes get the same share while the request runs, the cores when alone
    busy_fraction = out.utilization["app"] / share
    expected = out.utilization["app"] + background * share * busy_fraction
    expected += min(background, cores) * (1 - busy_fraction)
    assert out.host_busy == pytest.approx(expected, rel=1e-6)


def test_a_shared_core_is_a_slower_processor_sharing_server_for_exact_mva() -> None:
    """One processor-sharing server (one process) on a 1-core host beside b = 1.5 tasks of
    other processes: whenever it serves, it gets 1 / 2.5 of the core whatever its queue, so it
    is a processor-sharing station with demand D x 2.5, which exact MVA solves (a second
    method, sharing nothing with the simulator)."""
    D, Z, b = 2e-3, 0.05, 1.5
    exact_model = NTierModel(
        tiers=(TierModel(TierFacts("db", 1, None, 1), D * (1 + b)),), think_time=Z
    )
    for users in (3, 20):
        exact = predict(exact_model, [users], solver="mva")[0]
        out = simulate_closed(
            [SimTier("db", 1, 1.0, None)],
            users=users,
            think_time=Z,
            demand_means=np.array([D]),
            duration=400,
            seed=6,
            host_cores=1.0,
            host_background=b,
        )
        assert out.throughput == pytest.approx(exact.throughput, rel=0.02)
        assert out.rt_mean == pytest.approx(exact.rt_mean, rel=0.06)


def test_tiers_running_more_tasks_than_cores_share_them() -> None:
    """Two tiers of two processes each, no quotas, on a 2-core host, users without think time:
    alone each tier could use 2 cores (X = 2 / D of the larger demand), but from two requests
    on the host's cores are always busy and shared, so X = C / (D_app + D_db), the host's
    capacity. One tier of four processes beside b tasks of other processes gets C x 4 / (b + 4)
    cores."""
    D = np.array([3e-3, 2e-3])
    tiers = [SimTier("app", 1, 2.0, None), SimTier("db", 1, 2.0, None)]
    kw = dict(users=30, think_time=0.0, demand_means=D, duration=100, seed=9)
    free = simulate_closed(tiers, **kw)  # type: ignore[arg-type]
    shared = simulate_closed(tiers, host_cores=2.0, **kw)  # type: ignore[arg-type]
    assert free.throughput == pytest.approx(2 / D.max(), rel=0.02)
    assert shared.throughput == pytest.approx(2 / D.sum(), rel=0.02)
    assert shared.host_busy == pytest.approx(2.0, rel=1e-3)
    # one tier of 4 processes beside b = 2 tasks: its 4 tasks get C x 4 / (b + 4) cores
    four = [SimTier("app", 1, 4.0, None)]
    kw["demand_means"] = D[:1]
    busy = simulate_closed(four, host_cores=2.0, host_background=2.0, **kw)  # type: ignore[arg-type]
    assert busy.throughput == pytest.approx(2 * 4 / (2 + 4) / D[0], rel=0.02)
    assert busy.host_share == pytest.approx(2 / (2 + 4), rel=1e-6)


def test_a_shared_core_burns_the_quota_at_its_share() -> None:
    """Under a quota the budget is CPU time, spent at the task's share of a core. One user
    beside one other task on a 1-core host (share 1/2), 0.2 core quota (20 ms per 100 ms):
    a 10 ms request takes 20 ms and never meets the budget. A 25 ms request starting at offset
    φ of a period: for φ <= 60 ms it spends the budget in 40 ms, waits for the next period and
    ends 10 ms into it (R = 110 ms - φ); for 60 < φ <= 90 ms the refill comes first and it runs
    through (R = 50 ms); beyond, it is throttled in the next period and R = 110 ms."""

    def rested(demand: float) -> np.ndarray:
        """Response times of requests sent 200 ms or more after the previous one ended (their
        period and the one before started with the whole budget)."""
        out = _one_user(
            demand,
            SimTier("db", 1, 1.0, 0.2),
            think_time=0.5,
            warmup=0.0,
            duration=200,
            trace=True,
            host_cores=1.0,
            host_background=1.0,
        )
        assert out.trace is not None and out.host_share == pytest.approx(0.5)
        req = np.array([(s, e) for _, s, e in out.trace.requests])
        rt = (req[1:, 1] - req[1:, 0])[req[1:, 0] - req[:-1, 1] >= 0.2]
        assert rt.size > 150
        return rt

    np.testing.assert_allclose(rested(0.01), 0.02, rtol=1e-9)
    rt = rested(0.025)
    assert np.all((rt >= 0.05 - 1e-9) & (rt <= 0.11 + 1e-9))
    assert 0.45 < (rt > 0.06).mean() < 0.75  # φ < 50 ms or φ > 90 ms: 60 %


def test_the_model_passes_its_host_to_the_simulation() -> None:
    model = _model({"web": 0.5, "app": 0.8, "db": 0.2}, {"web": 3e-4, "app": 1.3e-3, "db": 1.6e-3})
    quiet = predict(model, [30], solver="quota-sim", duration=100, seed=3)[0]
    busy_model = replace(model, host=HostModel(2.0, background=1.5, client_demand=1e-4))
    busy = predict(busy_model, [30], solver="quota-sim", duration=100, seed=3)[0]
    assert quiet.host_share is None and "host" not in quiet.to_dict()
    assert busy.host_share is not None and busy.host_share < 0.9
    assert busy.rt_mean > 1.2 * quiet.rt_mean
    # the load generator's CPU grows with the throughput it sends
    assert busy_model.host.competing(100.0) == pytest.approx(1.5 + 0.01)  # type: ignore[union-attr]
    assert busy.to_dict()["host"]["cpu_cores"] > 1.5
