"""Phase-type distributions, the M/PH/1 queue and the hyper-Erlang fit against closed forms,
the Kafka thesis's published fit (seed 002 §2.10) and injected ground truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tierscope.cli import main
from tierscope.errors import InputError, UnstableError
from tierscope.estimate.ph import fit_hyper_erlang, read_samples
from tierscope.qn.phase_type import PhaseType, mph1
from tierscope.qn.queues import mg1, mm1

SERVICES = {
    "erlang": PhaseType.erlang(4, 40.0),
    "hyperexponential": PhaseType.hyperexponential([0.1, 0.9], [2.0, 30.0]),
    "hyper-erlang": PhaseType.hyper_erlang([(0.2, 3, 10.0), (0.5, 1, 40.0), (0.3, 5, 25.0)]),
}
#: Wu's hyper-Erlang fit of the end-to-end latency at batch size 7 (Table 6.1: probability,
#: phases, rate per ms); the digest derives mean 470.1 ms and the survival below.
WU_BS7 = [
    (0.173600, 44, 0.10376298),
    (0.145600, 148, 0.20615273),
    (0.192600, 13, 0.10828728),
    (0.177733, 18, 0.06701713),
    (0.150733, 170, 0.19943805),
    (0.159733, 72, 0.12419047),
]


def pk_response_time(lam: float, ph: PhaseType) -> float:
    """Pollaczek–Khinchine: E[R] = E[S] + lambda E[S^2] / (2 (1 - rho))."""
    return ph.mean + lam * ph.moment(2) / (2.0 * (1.0 - lam * ph.mean))


@pytest.mark.parametrize("name", SERVICES)
@pytest.mark.parametrize("rho", [0.05, 0.5, 0.9, 0.99])
def test_mph1_mean_response_time_is_pollaczek_khinchine(name: str, rho: float) -> None:
    ph = SERVICES[name]
    lam = rho / ph.mean
    q = mph1(lam, ph)
    assert q.response_time == pytest.approx(pk_response_time(lam, ph), rel=1e-9, abs=0)
    assert q.utilization == pytest.approx(rho, rel=1e-12)
    assert q.extra["queue_length"] == pytest.approx(lam * q.response_time, rel=1e-12)
    assert q.response_time == pytest.approx(mg1(lam, ph.mean, ph.scv).response_time, rel=1e-9)


def test_mph1_with_exponential_service_is_mm1() -> None:
    q, ref = mph1(7.0, PhaseType.exponential(10.0)), mm1(7.0, 0.1)
    for field in ("response_time", "mean_number", "mean_queue", "waiting_time"):
        assert getattr(q, field) == pytest.approx(getattr(ref, field), rel=1e-10)


def test_mph1_refuses_an_overloaded_server() -> None:
    with pytest.raises(UnstableError, match="arrival-rate"):
        mph1(41.0, PhaseType.exponential(40.0))


def test_moments_and_survival_follow_the_closed_forms() -> None:
    erl = SERVICES["erlang"]
    assert erl.mean == pytest.approx(0.1) and erl.scv == pytest.approx(0.25)
    x = np.array([0.02, 0.1, 0.3])
    np.testing.assert_allclose(erl.cdf(x), stats.gamma.cdf(x, 4, scale=1 / 40.0), rtol=1e-10)
    h = SERVICES["hyperexponential"]
    m2 = 2 * (0.1 / 2.0**2 + 0.9 / 30.0**2)
    assert h.moment(2) == pytest.approx(m2, rel=1e-12)
    np.testing.assert_allclose(h.pdf(x), 0.1 * 2 * np.exp(-2 * x) + 0.9 * 30 * np.exp(-30 * x))


def test_wu_batch_size_7_fit_has_the_published_mean_and_survival() -> None:
    ph = PhaseType.hyper_erlang(WU_BS7)
    assert ph.phases == 465
    assert ph.mean == pytest.approx(470.1, abs=0.05)
    assert math.sqrt(ph.scv) * ph.mean == pytest.approx(260, abs=0.5)
    zeta = [100, 200, 350, 500, 700, 900]
    expected = [0.944, 0.787, 0.628, 0.458, 0.246, 0.035]
    np.testing.assert_allclose(ph.sf(zeta), expected, atol=6e-4)


def test_sampling_the_chain_gives_its_moments() -> None:
    ph = SERVICES["hyper-erlang"]
    x = ph.sample(200_000, np.random.default_rng(3))
    assert x.mean() == pytest.approx(ph.mean, rel=0.01)
    assert x.var() / x.mean() ** 2 == pytest.approx(ph.scv, rel=0.03)
    grid = np.quantile(x, [0.1, 0.5, 0.9])
    np.testing.assert_allclose(ph.cdf(grid), [0.1, 0.5, 0.9], atol=0.005)


@pytest.mark.parametrize(
    "alpha, D, field",
    [
        ([0.5, 0.6], [[-1, 0], [0, -1]], "alpha"),
        ([1.0], [[1.0]], "D"),
        ([1.0, 0.0], [[-1.0, 2.0], [0.0, -1.0]], "D"),  # a row that gains probability
        ([1.0], [[-1.0, 0.0]], "D"),
    ],
)
def test_an_invalid_distribution_names_its_field(alpha: list, D: list, field: str) -> None:
    with pytest.raises(InputError) as info:
        PhaseType(np.array(alpha, dtype=float), np.array(D, dtype=float))
    assert info.value.field == field


def test_the_fit_recovers_a_known_hyper_erlang() -> None:
    """The issue's acceptance: 1e5 samples of a known hyper-Erlang; mean within 2 %, SCV within
    10 %, KS distance at most 0.02, and a Gamma fit beside it (which the truth beats)."""
    truth = SERVICES["hyper-erlang"]
    x = truth.sample(100_000, np.random.default_rng(11))
    fit = fit_hyper_erlang(x, phases=truth.phases)
    ph = fit.ph
    assert ph.mean == pytest.approx(truth.mean, rel=0.02)
    assert ph.scv == pytest.approx(truth.scv, rel=0.10)
    assert fit.ks <= 0.02
    assert stats.kstest(x, fit.cdf).statistic == pytest.approx(fit.ks, abs=1e-9)
    assert fit.gamma["ks"] > fit.ks and fit.gamma["log_likelihood"] < fit.log_likelihood
    # the branches found are the planted ones
    found = sorted((k, round(r, 0)) for _, k, r in fit.branches)
    assert [k for k, _ in found] == [1, 3, 5]
    by_order = sorted(fit.branches, key=lambda b: b[1])
    for (_, k, rate), want in zip(by_order, [40, 10, 25], strict=True):
        assert rate == pytest.approx(want, rel=0.05), k


def test_a_gamma_shaped_sample_fits_an_erlang_and_matches_the_gamma() -> None:
    x = stats.gamma.rvs(6.0, scale=0.01, size=50_000, random_state=5)
    fit = fit_hyper_erlang(x, phases=6, branches=1)
    assert fit.branches[0][1] == 6 and fit.ph.mean == pytest.approx(0.06, rel=0.01)
    assert fit.gamma["shape"] == pytest.approx(6.0, rel=0.03)


def test_samples_files_and_bad_input(tmp_path: Path) -> None:
    (tmp_path / "one.csv").write_text("0.1\n0.2\n\n0.3\n")
    np.testing.assert_allclose(read_samples(tmp_path / "one.csv"), [0.1, 0.2, 0.3])
    (tmp_path / "two.csv").write_text("id,latency\n1,0.5\n2,0.25\n")
    np.testing.assert_allclose(read_samples(tmp_path / "two.csv", "latency"), [0.5, 0.25])
    with pytest.raises(InputError, match="--column"):
        read_samples(tmp_path / "two.csv")
    with pytest.raises(InputError, match="positive"):
        fit_hyper_erlang(np.array([0.1] * 20 + [0.0]), phases=2)
    with pytest.raises(InputError, match="--phases"):
        fit_hyper_erlang(np.ones(20), phases=0)


def test_cli_contracts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ph = SERVICES["hyper-erlang"]
    (tmp_path / "ph.json").write_text(json.dumps(ph.to_dict()))
    lam = 0.6 / ph.mean
    code = main(["model", "queue", "--kind", "mph1", "--arrival-rate", str(lam),
                 "--ph", str(tmp_path / "ph.json"), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and set(doc) >= {"response_time", "queue_length", "utilization"}
    assert doc["response_time"] == pytest.approx(pk_response_time(lam, ph), rel=1e-9)

    x = ph.sample(5_000, np.random.default_rng(2))
    (tmp_path / "s.csv").write_text("latency\n" + "\n".join(map(str, x)) + "\n")
    code = main(["fit", "ph", str(tmp_path / "s.csv"), "--phases", "4", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and set(doc) >= {"alpha", "D", "mean", "scv", "log_likelihood", "gamma"}
    assert PhaseType.from_dict(doc).mean == pytest.approx(doc["mean"])
    assert doc["mean"] == pytest.approx(x.mean(), rel=1e-6)  # EM keeps the sample mean

    (tmp_path / "bad.json").write_text('{"alpha": [1], "D": [[2]]}')
    for args, field in (
        (["model", "queue", "--kind", "mph1", "-l", "1", "--ph", str(tmp_path / "bad.json")], "D"),
        (["model", "queue", "--kind", "mph1", "-l", "1"], "--ph"),
        (["model", "queue", "--kind", "mm1", "-l", "1", "-s", "0.1", "--ph", "x.json"], "--ph"),
        (["model", "queue", "--kind", "mph1", "-l", "99", "--ph", str(tmp_path / "ph.json")],
         "--arrival-rate"),
        (["fit", "ph", str(tmp_path / "missing.csv"), "--phases", "2"], "SAMPLES"),
    ):  # fmt: skip
        assert main(args) == 2, args
        assert field in capsys.readouterr().err, args
