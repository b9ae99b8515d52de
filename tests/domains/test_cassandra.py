"""Dipietro's Cassandra model (seed 004 §5) against independent truths: the digest's asymptotic
bounds from the thesis's demands (Table 3.2), the simulated model approaching them, the share
of remote requests and the replica requests per read counted in the simulation, and the join's
semantics at one client against closed forms (one job: no queueing, every stage exponential)."""

from __future__ import annotations

import math

import pytest

from tierscope.domains.cassandra import (
    THESIS_DEMANDS,
    CassandraCluster,
    cpu_per_request,
    replicas_waited,
    throughput_bound,
)
from tierscope.errors import InputError
from tierscope.sim.runner import simulate

#: the digest's table (§9.1): CPU per request [ms] and the bound [req/s] on 4 nodes x 2 cores
DIGEST = {"one": (0.978, 8180), "quorum": (1.847, 4330), "all": (2.50, 3200)}


@pytest.mark.parametrize("cl", ["one", "quorum", "all"])
def test_thesis_demands_give_the_digests_bounds(cl: str) -> None:
    c = CassandraCluster.thesis(cl, clients=10)
    cpu_ms, bound = DIGEST[cl]
    assert cpu_per_request(c) * 1e3 == pytest.approx(cpu_ms, rel=0.005)
    assert throughput_bound(c)["per_station"]["cpu"] == pytest.approx(bound, rel=0.01)


def test_the_client_network_binds_first_under_one() -> None:
    """Under ONE the YCSB network (0.147 ms a request and its 1 KB answer) caps the cluster at
    6,818 req/s before the CPUs (8,180): the thesis measured about 6,800 at 45 jobs."""
    b = throughput_bound(CassandraCluster.thesis("one", clients=45))
    assert b["bottleneck"] == "ycsb-net" and b["throughput"] == pytest.approx(6818, rel=0.001)
    assert throughput_bound(CassandraCluster.thesis("quorum", clients=45))["bottleneck"] == "cpu"


@pytest.mark.parametrize(("cl", "clients"), [("one", 120), ("quorum", 160), ("all", 160)])
def test_the_simulated_model_approaches_its_bound(cl: str, clients: int) -> None:
    c = CassandraCluster.thesis(cl, clients=clients)
    bound = throughput_bound(c)["throughput"]
    out = simulate(c.model(), seed=3, precision=0.02).to_dict()
    x = out["classes"]["client"]["throughput"]
    assert 0.93 * bound <= x <= 1.01 * bound, (x, bound)


def test_remote_share_and_replica_requests_per_read() -> None:
    """RF 3 on 4 nodes: a quarter of the requests land on a node without a replica; under
    QUORUM (w = 2) a local read sends one replica request, a remote one two."""
    c = CassandraCluster.thesis("quorum", clients=8)
    out = simulate(c.model(), seed=5, precision=0.02).to_dict()
    x = out["classes"]["client"]["throughput"]
    st = out["stations"]

    def per_class(prefix: str, cls: str) -> float:
        return sum(s["per_class"].get(cls, {}).get("throughput", 0.0)
                   for name, s in st.items() if name.startswith(prefix))  # fmt: skip

    remote = sum(st[f"fork-{k}-remote"]["throughput"] for k in range(1, 5))
    local = sum(st[f"fork-{k}-local"]["throughput"] for k in range(1, 5))
    assert remote / x == pytest.approx(0.25, abs=0.02)
    assert (local + remote) / x == pytest.approx(1.0, rel=0.01)
    assert per_class("route-", "local") / local == pytest.approx(1.0, rel=0.01)
    assert per_class("route-", "remote") / remote == pytest.approx(2.0, rel=0.01)
    # each replica request reads a disk: local reads once itself, replicas once each
    disks = sum(st[f"disk-{k}"]["throughput"] for k in range(1, 5))
    assert disks / x == pytest.approx(0.75 * 2 + 0.25 * 2, rel=0.02)


def _replica_trip(c: CassandraCluster) -> list[float]:
    """The stages of a replica request (router, its node's net, CPU, disk, the answer back)."""
    return [c.net_request, c.cpu["replica"], c.disk, c.net_data]


def _min_with(d: float, stages: list[float]) -> float:
    """E[min(D, T)]: D exponential with mean d, T a sum of exponential stages (its Laplace
    transform at 1/d): (1 − Π μ_i / (μ_i + a)) / a."""
    a = 1.0 / d
    laplace = math.prod((1 / s) / (1 / s + a) for s in stages)
    return (1.0 - laplace) / a


def _cycle(c: CassandraCluster, fork: float, *, kind: str = "local") -> float:
    """One client's cycle: its CPU and network, the coordinator's parse, the fork-to-join time
    ``fork``, the end on the coordinator and the answer."""
    return (c.client_cpu + c.net_request + c.net_request + c.cpu[kind] + fork
            + c.cpu[f"{kind}_end"] + c.net_data + c.net_data)  # fmt: skip


@pytest.mark.parametrize("replicated", [False, True])
def test_one_client_join_waits_as_the_consistency_level_says(replicated: bool) -> None:
    """Two nodes, RF 2, every read local: under ALL the join waits for the local disk read and
    the replica's answer (E[max] = E[D] + E[T] − E[min]); with the replicated quorum under ONE
    it asks both and goes on with the first (E[min])."""
    cl = "one" if replicated else "all"
    c = CassandraCluster.thesis(cl, clients=1, nodes=2, replication=2,
                                replicated_quorum=replicated)  # fmt: skip
    trip = _replica_trip(c)
    first = _min_with(c.disk, trip)
    fork = first if replicated else c.disk + sum(trip) - first
    out = simulate(c.model(), seed=7, precision=0.005).to_dict()
    x = out["classes"]["client"]["throughput"]
    assert x == pytest.approx(1.0 / _cycle(c, fork), rel=0.01)


def test_one_client_remote_reads_go_through_a_replica() -> None:
    """Two nodes, RF 1, ONE: half the reads are local (disk), half remote (one replica
    request, no local read)."""
    c = CassandraCluster.thesis("one", clients=1, nodes=2, replication=1)
    local = _cycle(c, c.disk)
    remote = _cycle(c, sum(_replica_trip(c)), kind="remote")
    out = simulate(c.model(), seed=9, precision=0.005).to_dict()
    x = out["classes"]["client"]["throughput"]
    assert x == pytest.approx(1.0 / (0.5 * local + 0.5 * remote), rel=0.01)


def _mva(demands: list[float], population: int) -> float:
    """Exact MVA throughput of a closed network of single-server queues."""
    q = [0.0] * len(demands)
    x = 0.0
    for n in range(1, population + 1):
        r = [d * (1 + qk) for d, qk in zip(demands, q, strict=True)]
        x = n / sum(r)
        q = [x * rk for rk in r]
    return x


@pytest.mark.parametrize("limit", [1, None])
def test_concurrent_reads_limit_the_cpu_to_that_many_requests(limit: int | None) -> None:
    """One node, RF 1, ONE, every stage exponential with one server except the node's CPU (two
    cores, processor sharing): with ``concurrent_reads`` 1 the CPU serves one request at a time,
    the others waiting outside, so the network is exact MVA's with a one-server CPU; without a
    limit the two cores serve two at once (the CPU bound doubles)."""
    demands = {"local": 1e-3, "remote": 0.0, "replica": 0.0, "local_end": 0.0, "remote_end": 0.0}
    c = CassandraCluster(1, 1, "one", 8, demands, net_request=1e-4, net_data=1e-4, disk=5e-4,
                         client_cpu=2e-4, cores=2, client_cores=1,
                         concurrent_reads=limit)  # fmt: skip
    out = simulate(c.model(), seed=13, precision=0.01).to_dict()
    x = out["classes"]["client"]["throughput"]
    # per request: client CPU; client and node networks twice (request, answer); CPU; disk
    one_core = _mva([2e-4, 2e-4, 2e-4, 1e-3, 5e-4], 8)
    st = out["stations"]
    if limit == 1:
        assert x == pytest.approx(one_core, rel=0.02)
        assert st["cpu-1"]["queue_length"] <= 1.0 < st["wait-1"]["queue_length"]
    else:
        assert x > 1.3 * one_core and "wait-1" not in st
        assert x <= 1 / 5e-4 * 1.01  # the disk binds next


def test_bad_clusters_are_refused() -> None:
    with pytest.raises(InputError, match="replication"):
        CassandraCluster.thesis("one", clients=1, nodes=2, replication=3)
    with pytest.raises(InputError, match="consistency"):
        CassandraCluster.thesis("two", clients=1)
    with pytest.raises(InputError, match="clients"):
        CassandraCluster.thesis("one", clients=0)
    with pytest.raises(InputError, match="concurrent_reads"):
        CassandraCluster.thesis("one", clients=1, concurrent_reads=0)
    assert [replicas_waited(cl, 3) for cl in ("one", "quorum", "all")] == [1, 2, 3]
    assert replicas_waited("quorum", 4) == 3 and THESIS_DEMANDS["one"]["local_end"] == 0.0


def test_replicated_quorum_helps_at_light_load_and_hurts_at_heavy_load() -> None:
    """§5.9's what-if: asking all three replicas and going on with the first two answers is
    no slower with few clients (the faster two of three answers; +13 % here, the thesis saw
    about the same) and slower when the CPUs saturate (the late answers still cost a replica
    read each: its bound is 3,214 req/s against 4,331)."""

    def x(clients: int, replicated: bool) -> float:
        c = CassandraCluster.thesis("quorum", clients=clients, replicated_quorum=replicated)
        out = simulate(c.model(), seed=11, precision=0.01).to_dict()
        return float(out["classes"]["client"]["throughput"])

    light_plain, light_replicated = x(2, False), x(2, True)
    assert light_replicated >= light_plain
    heavy_plain, heavy_replicated = x(160, False), x(160, True)
    bound = throughput_bound(CassandraCluster.thesis("quorum", clients=160,
                                                     replicated_quorum=True))  # fmt: skip
    assert heavy_replicated < 0.85 * heavy_plain
    assert heavy_replicated <= 1.01 * bound["throughput"]
