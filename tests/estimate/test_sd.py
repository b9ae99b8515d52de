"""State-divergence estimation: divergences, state selection, recovery of known demands."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.estimate._sd_protocol import evaluate, observations
from tierscope.errors import InputError
from tierscope.estimate import SD, Observations
from tierscope.estimate.sd import _select, divergence


def test_divergences_by_hand() -> None:
    p, q = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    bc = math.sqrt(0.125) + math.sqrt(0.375)
    assert divergence("hellinger", p, q) == pytest.approx(math.sqrt(1 - bc))
    assert divergence("bhattacharyya", p, q) == pytest.approx(-math.log(bc))
    assert divergence("kl", p, q) == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75))
    m = (p + q) / 2
    js = 0.5 * np.sum(p * np.log2(p / m)) + 0.5 * np.sum(q * np.log2(q / m))
    assert divergence("js", p, q) == pytest.approx(js)
    for kind in ("hellinger", "bhattacharyya", "kl", "js"):
        assert divergence(kind, p, p) == pytest.approx(0.0, abs=1e-12)


def test_bands_keep_states_from_high_medium_and_low_probability() -> None:
    probs = np.array([0.4, 0.2, 0.15, 0.1, 0.08, 0.05, 0.02, 1e-6])
    states = np.arange(probs.size)[:, None]
    largest = _select(states, probs, 3, "largest")
    assert list(largest) == [0, 1, 2]
    bands = _select(states, probs, 3, "bands")
    # the negligible state is dropped, then one state from each third of the ranking
    assert list(bands) == [0, 3, 5]


def test_sd_is_exact_on_exact_marginals() -> None:
    rng = np.random.default_rng(3)
    D = rng.uniform(1e-3, 0.1, size=(2, 2))
    obs = observations(D, samples=None, rng=rng)
    est = SD(k_states=15, search="local", n_boot=0).fit(obs)
    np.testing.assert_allclose(est.demands_, D, rtol=1e-3)
    assert est.run_time_ > 0 and est.states_kept_ == 30


def test_sd_on_sampled_states_improves_with_the_states_kept() -> None:
    """Seed 004's protocol with 2,000 sampled states per station: K3 loses information that
    K15 keeps (the thesis: use at least 15 states)."""
    rows = evaluate(3, k_states=[3, 15], searches=["multistart"], deltas=[None], samples=2000)
    err = {r["k_states"]: r["mean_error_pct"] for r in rows}
    assert err[15] < 10.0
    assert err[15] < err[3]


def test_sd_intervals_and_constraint() -> None:
    rng = np.random.default_rng(4)
    D = rng.uniform(1e-2, 0.1, size=(2, 2))
    obs = observations(D, samples=3000, rng=rng)
    est = SD(k_states=15, search="local", delta=0.2, n_boot=8).fit(obs)
    assert est.ci_low_ is not None and est.ci_high_ is not None
    assert np.all(est.ci_low_ <= est.ci_high_)
    assert np.mean(np.abs(est.demands_ / D - 1)) < 0.15


def test_sd_needs_populations_and_queue_samples() -> None:
    obs = Observations(
        classes=("a",), stations=("s",), throughput=np.ones((3, 1)), servers=np.ones(1)
    )
    with pytest.raises(InputError, match="queue"):
        SD(n_boot=0).fit(obs)
    with pytest.raises(InputError, match="search"):
        SD(search="fmincon").fit(obs)
    with pytest.raises(InputError, match="k_states"):
        SD(k_states=0).fit(obs)
