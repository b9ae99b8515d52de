"""Issue 7 acceptance: estimators recover known demands.

Simulator data (2 classes, 1 PS station, known demands, utilisation 0.5, Poisson noise and
changing mix): UBR, CI and MLE within ±10 %; noise-free data: UBR exact to 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.estimate._synthetic import D_TRUE, exact_open_ps, two_class_ps_run
from tierscope.estimate import CI, MLE, UBO, UBR, Observations


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Observations:
    return two_class_ps_run(tmp_path_factory.mktemp("est") / "run")


def test_the_simulated_station_runs_at_utilisation_one_half(simulated: Observations) -> None:
    assert simulated.utilization is not None
    assert simulated.utilization.mean() == pytest.approx(0.5, abs=0.03)
    assert simulated.records is not None


@pytest.mark.parametrize("method", [UBR, CI, MLE, UBO])
def test_demands_within_ten_percent_at_utilisation_one_half(
    simulated: Observations, method: type
) -> None:
    est = method(n_boot=40).fit(simulated)
    rel = est.demands_ / D_TRUE - 1
    assert np.all(np.abs(rel) < 0.10), (method.name, est.demands_, rel)
    assert est.ci_low_ is not None and est.ci_high_ is not None
    assert np.all(est.ci_low_ <= est.demands_ + 1e-15)
    assert np.all(est.demands_ <= est.ci_high_ + 1e-15)
    # the interval is informative: narrower than the estimate itself
    assert np.all(est.ci_high_ - est.ci_low_ < est.demands_)


def test_ubr_is_exact_on_noise_free_data() -> None:
    rng = np.random.default_rng(7)
    D = rng.uniform(0.001, 0.05, size=(3, 2))
    X = rng.uniform(1, 10, size=(12, 2))
    obs = exact_open_ps(D, X, servers=np.array([1.0, 2.0, 4.0]))
    est = UBR(n_boot=0).fit(obs)
    np.testing.assert_allclose(est.demands_, D, rtol=1e-6, atol=0)
    assert np.max(np.abs(est.demands_ - D)) < 1e-9


def test_mle_recovers_noise_free_demands_from_response_times_only() -> None:
    rng = np.random.default_rng(8)
    D = np.array([[0.02, 0.05]])
    X = rng.uniform(1, 9, size=(20, 2))
    obs = exact_open_ps(D, X)
    no_util = Observations(
        classes=obs.classes,
        stations=obs.stations,
        throughput=obs.throughput,
        servers=obs.servers,
        response_time=obs.response_time,
    )
    est = MLE(n_boot=0).fit(no_util)
    np.testing.assert_allclose(est.demands_, D, rtol=1e-3)


def test_ubo_separates_collinear_classes_with_response_times() -> None:
    """A constant class mix leaves UBR unidentified; the response-time law separates them."""
    D = np.array([[0.02, 0.05]])
    scale = np.linspace(1, 8, 10)[:, None]
    X = scale * np.array([[1.0, 2.0]])  # the mix never changes
    obs = exact_open_ps(D, X)
    ubr = UBR(n_boot=0).fit(obs)
    assert any("collinear" in n for n in ubr.notes_)
    # UBR still fits the utilisations; only the split is arbitrary
    np.testing.assert_allclose(X @ ubr.demands_.T, obs.busy, rtol=1e-6)
    ubo = UBO(n_boot=0).fit(obs)
    assert ubo.demands_ == pytest.approx(D, rel=1e-4)
