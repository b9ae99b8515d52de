"""Demands from a run of a Cassandra cluster: the client and every node as stations, complete
information and the utilisation law on their CPU, SD on the Native-Transport-Requests pool's
tasks polled once a second (seed 004 §7), reported beside complete information's (§9.3).

The truth is injected: a simulated sweep with known demands written in the runner's format
(:mod:`tests.estimate._cassandra_run`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tierscope import workflows
from tierscope.estimate import CI, SD, UBR, observations_from_run
from tierscope.store import read_run

from ._cassandra_run import NODES, write_cassandra_sweep

CLIENT_S, NODE_S = 0.002, 0.003  # CPU per request: the client, and the coordinator
TRUTH = np.array([CLIENT_S, *(NODE_S / len(NODES) for _ in NODES)])  # per request of all


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cassandra") / "run"
    write_cassandra_sweep(
        out, levels=[2, 4, 8], client_demand=CLIENT_S, node_demand=NODE_S, quota=0.5, seed=2
    )
    return out


def test_the_client_and_every_node_are_stations_with_their_cpu(run_dir: Path) -> None:
    obs = observations_from_run(read_run(run_dir))
    assert obs.stations == ("client", *NODES)
    assert obs.servers.tolist() == [1.0, 0.5, 0.5, 0.5]  # a worker; each node's quota
    assert obs.queue is not None and np.isnan(obs.queue[:, 0, 0]).all()  # client not observed
    assert obs.queue.shape[0] >= 3 * 55  # a poll a second, 60 s a level
    for Method in (CI, UBR):
        demands = Method(n_boot=0).fit(obs).demands_[:, 0]
        np.testing.assert_allclose(demands, TRUTH, rtol=0.04, err_msg=Method.__name__)


def test_sd_finds_the_demands_from_the_pools_polled_once_a_second(run_dir: Path) -> None:
    obs = observations_from_run(read_run(run_dir))
    sd = SD(n_boot=0, starts=4).fit(obs)
    np.testing.assert_allclose(sd.demands_[:, 0], TRUTH, rtol=0.2)
    truth = sd.divergences(obs, TRUTH[:, None])
    # SD's demands fit the observed marginals at least as well as the truth does (sampling
    # noise), and a node three times too slow fits them much worse
    assert sd.divergences(obs, sd.demands_)["hellinger"] <= truth["hellinger"] + 1e-3
    wrong = TRUTH.copy()
    wrong[1] *= 3
    assert sd.divergences(obs, wrong[:, None])["kl"] > 3 * truth["kl"]


def test_estimate_reports_sd_beside_complete_information(run_dir: Path) -> None:
    doc = workflows.estimate_input(run_dir, "sd", n_boot=0, starts=4)
    sd = doc["sd"]
    ci = CI(n_boot=0).fit(observations_from_run(read_run(run_dir)))
    assert sd["ci_demands"]["node-2"]["request"] == pytest.approx(ci.demands_[2, 0])
    for name in ("sd", "ci"):
        assert set(sd["marginals"][name]) == {"hellinger", "bhattacharyya", "kl", "js"}
    # SD minimises the Hellinger distance over the states it keeps: CI's demands are one of
    # the points it could have chosen
    assert sd["marginals"]["sd"]["hellinger"] <= sd["marginals"]["ci"]["hellinger"] + 1e-3
    assert doc["demands"]["client"]["request"] == pytest.approx(CLIENT_S, rel=0.2)
