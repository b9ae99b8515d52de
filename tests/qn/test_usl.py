"""USL fitting against the R ``usl`` package and planted parameters; CSV reading."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierscope.errors import InputError
from tierscope.qn.usl import UslFit, fit_usl, read_usl_csv, usl_throughput

SPECSDM91_N = [1, 18, 36, 72, 108, 144, 216]
SPECSDM91_X = [64.9, 995.9, 1652.4, 1853.2, 1828.9, 1775.0, 1702.2]
GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_specsdm91_matches_r_usl() -> None:
    # Values printed by R: summary(usl(throughput ~ load, specsdm91)); peak.scalability().
    fit = fit_usl(SPECSDM91_N, SPECSDM91_X)
    assert fit.sigma == pytest.approx(0.0277285, rel=1e-3)
    assert fit.kappa == pytest.approx(0.0001044, rel=1e-3)
    assert fit.lambda_ == pytest.approx(89.995, rel=1e-3)
    assert fit.n_peak == pytest.approx(96.5, rel=1e-3)
    assert fit.n_peak_int in (96, 97)
    assert fit.n_points == 7
    # the reported optimum really is a least-squares minimum (gradient ~ 0)
    assert fit.residuals == pytest.approx(
        tuple(np.array(SPECSDM91_X) - fit.predict(SPECSDM91_N)), abs=1e-9
    )
    assert fit.rmse == pytest.approx(math.sqrt(np.mean(np.square(fit.residuals))))
    assert 0.98 < fit.r2 < 1.0
    assert fit.x_peak >= fit.x_peak_int  # type: ignore[operator]
    assert fit.amdahl_limit == pytest.approx(fit.lambda_ / fit.sigma)


def test_specsdm91_is_a_local_minimum() -> None:
    fit = fit_usl(SPECSDM91_N, SPECSDM91_X)
    n, x = np.array(SPECSDM91_N, float), np.array(SPECSDM91_X)
    best = float(np.sum((x - usl_throughput(n, fit.sigma, fit.kappa, fit.lambda_)) ** 2))
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = np.array([fit.sigma, fit.kappa, fit.lambda_]) * (1 + rng.normal(0, 1e-3, 3))
        assert float(np.sum((x - usl_throughput(n, *p)) ** 2)) >= best * (1 - 1e-12)


def test_standard_errors_match_finite_difference_hessian() -> None:
    # independent route: Gauss-Newton covariance with a numerically differentiated Jacobian
    fit = fit_usl(SPECSDM91_N, SPECSDM91_X)
    n = np.array(SPECSDM91_N, float)
    p = np.array([fit.sigma, fit.kappa, fit.lambda_])
    jac = np.empty((n.size, 3))
    for j in range(3):
        h = np.zeros(3)
        h[j] = p[j] * 1e-6
        jac[:, j] = (usl_throughput(n, *(p + h)) - usl_throughput(n, *(p - h))) / (2 * h[j])
    s2 = float(np.sum(np.square(fit.residuals))) / (n.size - 3)
    se = np.sqrt(np.diag(s2 * np.linalg.inv(jac.T @ jac)))
    assert [fit.sigma_se, fit.kappa_se, fit.lambda_se] == pytest.approx(se, rel=1e-5)


@pytest.mark.parametrize(
    ("sigma", "kappa", "lam"),
    [
        (0.05, 1e-4, 100.0),
        (0.2, 0.0, 10.0),
        (0.0, 0.002, 3.5),
        (0.5, 0.01, 2000.0),
        (0.0, 0.0, 7.0),
    ],
)
def test_recovers_planted_parameters(sigma: float, kappa: float, lam: float) -> None:
    n = np.array(GRID, float)
    fit = fit_usl(n, usl_throughput(n, sigma, kappa, lam))
    assert fit.sigma == pytest.approx(sigma, abs=1e-7)
    assert fit.kappa == pytest.approx(kappa, abs=1e-9)
    assert fit.lambda_ == pytest.approx(lam, rel=1e-7)
    assert fit.rmse < 1e-6 * lam


@settings(max_examples=40, deadline=None)
@given(
    sigma=st.floats(0.001, 0.6),
    kappa=st.floats(1e-5, 1e-2),
    lam=st.floats(0.5, 1e4),
    start=st.integers(1, 4),
)
def test_recovery_property(sigma: float, kappa: float, lam: float, start: int) -> None:
    n = np.array([start * g for g in GRID[:7]], float)  # need not include N = 1
    fit = fit_usl(n, usl_throughput(n, sigma, kappa, lam))
    assert fit.sigma == pytest.approx(sigma, rel=1e-4, abs=1e-8)
    assert fit.kappa == pytest.approx(kappa, rel=1e-4)
    assert fit.lambda_ == pytest.approx(lam, rel=1e-4)


def test_peak_and_predict() -> None:
    n = np.array(GRID, float)
    fit = fit_usl(n, usl_throughput(n, 0.05, 1e-3, 10.0))
    assert fit.n_peak == pytest.approx(math.sqrt(0.95 / 1e-3), rel=1e-5)
    assert fit.n_peak_int == 31  # sqrt(950) = 30.82; X(31) > X(30)
    assert fit.predict(31) > fit.predict(30)
    assert isinstance(fit.predict(3.0), float)
    arr = fit.predict([1, 2, 3])
    assert isinstance(arr, np.ndarray) and arr.shape == (3,)
    assert fit.predict(1) == pytest.approx(10.0, rel=1e-7)


def test_to_dict_json_and_infinities() -> None:
    n = np.array(GRID, float)
    fit = fit_usl(n, usl_throughput(n, 0.1, 0.0, 5.0))  # kappa = 0: no peak
    assert fit.kappa == 0.0  # snapped onto the bound, not 1e-17
    d = fit.to_dict()
    assert d["n_peak"] is None and d["n_peak_int"] is None and d["x_peak_int"] is None
    assert d["x_peak"] == pytest.approx(50.0, rel=1e-6)  # asymptote lambda/sigma
    d = fit_usl(SPECSDM91_N, SPECSDM91_X).to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    for key in (
        "sigma",
        "kappa",
        "lambda",
        "n_peak",
        "x_peak",
        "sigma_se",
        "kappa_se",
        "lambda_se",
        "n_peak_int",
        "x_peak_int",
        "amdahl_limit",
        "r2",
        "rmse",
        "n_points",
        "residuals",
    ):
        assert key in d
    linear = fit_usl(n, 3.0 * n).to_dict()  # sigma = kappa = 0
    assert linear["amdahl_limit"] is None and linear["n_peak"] is None


def test_three_points_has_undefined_standard_errors() -> None:
    fit = fit_usl([1, 10, 40], [10.0, 70.0, 90.0])
    assert isinstance(fit, UslFit) and math.isnan(fit.sigma_se)
    assert fit.to_dict()["sigma_se"] is None


@pytest.mark.parametrize(
    ("n", "x", "field"),
    [
        ([1, 2], [1.0, 2.0], "concurrency"),
        ([1, 2, 3], [1.0, 2.0], "throughput"),
        ([1, 0, 3], [1.0, 2.0, 3.0], "concurrency"),
        ([1, 2, 3], [1.0, -2.0, 3.0], "throughput"),
        ([1, 2, math.nan], [1.0, 2.0, 3.0], "concurrency"),
        ([1, 2, 3], [1.0, math.inf, 3.0], "throughput"),
        ([1, 1, 2, 2], [1.0, 1.1, 2.0, 2.1], "concurrency"),
        ("123", [1.0, 2.0, 3.0], "concurrency"),
        ([1, 2, 3], [1.0, "2", 3.0], "throughput"),
    ],
)
def test_validation(n: object, x: object, field: str) -> None:
    with pytest.raises(InputError) as info:
        fit_usl(n, x)  # type: ignore[arg-type]
    assert info.value.field == field


# --------------------------------------------------------------------------- CSV


def test_read_csv_any_order(tmp_path: Path) -> None:
    path = tmp_path / "u.csv"
    pairs = enumerate(zip(SPECSDM91_N, SPECSDM91_X, strict=True))
    rows = "\n".join(f"{x},run{i}, {n} " for i, (n, x) in pairs)
    path.write_text("\ufeffThroughput,label,Concurrency\n" + rows + "\n\n", encoding="utf-8")
    n, x = read_usl_csv(path)
    assert n == [float(v) for v in SPECSDM91_N] and x == SPECSDM91_X
    assert fit_usl(n, x).sigma == pytest.approx(0.0277285, rel=1e-3)


@pytest.mark.parametrize(
    ("text", "field", "where"),
    [
        ("concurrency,throughput\n1,10\n2,abc\n", "throughput", ", line 3"),
        ("concurrency,throughput\n1,10\n\n-2,5\n", "concurrency", ", line 4"),
        ("concurrency,throughput\n1,10\n2\n", "throughput", ", line 3"),
        ("concurrency,tput\n1,10\n", "header", ", line 1"),
        ("concurrency,throughput,concurrency\n1,10,1\n", "header", ", line 1"),
        ("", "header", ""),
    ],
)
def test_read_csv_errors(tmp_path: Path, text: str, field: str, where: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_usl_csv(path)
    assert info.value.field == field
    assert info.value.source == f"{path}{where}"
    assert str(info.value).startswith(f"{path}{where}: field '{field}'")


def test_a_throughput_falling_from_the_start_peaks_at_one() -> None:
    """An open sweep's concurrency N = X R can start below 1 and the throughput fall from the
    first point: the fit reaches σ = 1, where sqrt((1 − σ)/κ) = 0 made the peak 0/0 (a kafka
    sweep's analysis crashed on it). The peak over N >= 1 is then at 1."""
    n = np.array([0.3, 0.8, 1.5, 3.0, 6.0])
    x = usl_throughput(n, 1.0, 0.2, 100.0)
    fit = fit_usl(n, x)
    assert fit.n_peak >= 1.0 and math.isfinite(fit.x_peak)
    assert fit.x_peak == pytest.approx(float(usl_throughput(fit.n_peak, fit.sigma, fit.kappa,
                                                             fit.lambda_)))  # fmt: skip
