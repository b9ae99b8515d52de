"""Universal Scalability Law (Gunther) fitting.

Model: X(N) = lambda N / (1 + sigma (N - 1) + kappa N (N - 1)), with lambda the throughput of a
single unit of concurrency, sigma the contention (serial) fraction and kappa the coherency
(crosstalk) cost. Throughput peaks at N* = sqrt((1 - sigma)/kappa).

Main design decision: fit all three parameters jointly by bounded nonlinear least squares on
the untransformed throughput (the same criterion as R's ``usl`` package, which uses ``nls``),
rather than the classic linearised fit that needs a measurement at N = 1 and distorts the
error structure. The optimiser is started from several points, including the linearised
solution, and the best optimum is kept; standard errors use the usual asymptotic covariance
s^2 (J^T J)^-1 at the optimum.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from os import PathLike
from typing import Any, overload

import numpy as np
from scipy.optimize import least_squares

from tierscope.errors import InputError

__all__ = ["UslFit", "fit_usl", "read_usl_csv", "usl_throughput"]

_FIELDS = ("concurrency", "throughput")


def usl_throughput(
    n: float | np.ndarray, sigma: float, kappa: float, lambda_: float
) -> float | np.ndarray:
    """Evaluate the USL throughput at concurrency ``n`` (scalar or array)."""
    return lambda_ * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def _json_float(x: float) -> float | None:
    # JSON has no inf/nan; None means "unbounded or undefined" to consumers.
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class UslFit:
    """Result of :func:`fit_usl`.

    ``n_peak`` is the continuous throughput peak (inf when kappa = 0), ``n_peak_int`` the
    better of its floor and ceiling (at least 1; None when there is no peak), ``x_peak`` and
    ``x_peak_int`` the modelled throughput there (at kappa = 0, ``x_peak`` is the asymptote
    lambda/sigma). ``amdahl_limit`` = lambda/sigma is the kappa-free ceiling. ``residuals`` are
    observed minus fitted throughput, in input order. Standard errors are NaN when undefined
    (exactly three points or a singular Jacobian).
    """

    sigma: float
    kappa: float
    lambda_: float
    sigma_se: float
    kappa_se: float
    lambda_se: float
    n_peak: float
    n_peak_int: int | None
    x_peak: float
    x_peak_int: float | None
    amdahl_limit: float
    r2: float
    rmse: float
    n_points: int
    residuals: tuple[float, ...]

    @overload
    def predict(self, n: float) -> float: ...
    @overload
    def predict(self, n: Sequence[float] | np.ndarray) -> np.ndarray: ...

    def predict(self, n: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
        """Modelled throughput at concurrency ``n`` (scalar in, float out; array in, array out)."""
        if isinstance(n, Real) and not isinstance(n, bool):
            return float(usl_throughput(float(n), self.sigma, self.kappa, self.lambda_))
        arr = np.asarray(n, dtype=float)
        return np.asarray(usl_throughput(arr, self.sigma, self.kappa, self.lambda_))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able representation; inf and NaN become None."""
        return {
            "sigma": float(self.sigma),
            "kappa": float(self.kappa),
            "lambda": float(self.lambda_),
            "sigma_se": _json_float(self.sigma_se),
            "kappa_se": _json_float(self.kappa_se),
            "lambda_se": _json_float(self.lambda_se),
            "n_peak": _json_float(self.n_peak),
            "n_peak_int": self.n_peak_int,
            "x_peak": _json_float(self.x_peak),
            "x_peak_int": None if self.x_peak_int is None else _json_float(self.x_peak_int),
            "amdahl_limit": _json_float(self.amdahl_limit),
            "r2": _json_float(self.r2),
            "rmse": float(self.rmse),
            "n_points": int(self.n_points),
            "residuals": [float(r) for r in self.residuals],
        }


# --------------------------------------------------------------------------- fitting


def _as_positive_array(name: str, values: object) -> np.ndarray:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InputError(name, values, "a sequence of finite numbers > 0")
    out = np.empty(len(values), dtype=float)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(float(v)):
            raise InputError(name, v, f"a finite number > 0 at index {i}")
        if float(v) <= 0.0:
            raise InputError(name, v, f"a finite number > 0 at index {i}")
        out[i] = float(v)
    return out


def _residuals(p: np.ndarray, n: np.ndarray, x: np.ndarray) -> np.ndarray:
    return usl_throughput(n, p[0], p[1], p[2]) - x


def _jacobian(p: np.ndarray, n: np.ndarray, x: np.ndarray) -> np.ndarray:
    sigma, kappa, lam = p
    d = 1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0)
    common = -lam * n / (d * d)
    return np.column_stack([common * (n - 1.0), common * n * (n - 1.0), n / d])


def _linearised_start(n: np.ndarray, x: np.ndarray, lam: float) -> np.ndarray:
    # lambda N / X - 1 = sigma (N-1) + kappa N (N-1) is linear in (sigma, kappa) once lambda is
    # fixed; a cheap, usually close start.
    design = np.column_stack([n - 1.0, n * (n - 1.0)])
    coef, *_ = np.linalg.lstsq(design, lam * n / x - 1.0, rcond=None)
    return np.array([min(max(coef[0], 0.0), 1.0), max(coef[1], 0.0), lam])


def _snap_to_bounds(p: np.ndarray, n: np.ndarray, x: np.ndarray) -> np.ndarray:
    # The interior-point optimiser stops a hair inside active bounds (sigma ~ 1e-17); report
    # the bound itself when that does not worsen the fit, so kappa = 0 yields an infinite peak
    # instead of a spurious one at N ~ 1e8.
    def rss(q: np.ndarray) -> float:
        r = _residuals(q, n, x)
        return float(np.dot(r, r))

    tol = 1e-9 * rss(p) + 1e-24 * float(np.dot(x, x))
    out = p.copy()
    for i, bound in ((0, 0.0), (0, 1.0), (1, 0.0)):
        trial = out.copy()
        trial[i] = bound
        if rss(trial) <= rss(p) + tol:
            out = trial
    return out


def fit_usl(
    concurrency: Sequence[float] | np.ndarray, throughput: Sequence[float] | np.ndarray
) -> UslFit:
    """Fit the USL to measured (concurrency, throughput) pairs.

    Bounds: 0 <= sigma <= 1, kappa >= 0, lambda > 0. Needs at least three points with at least
    three distinct concurrency levels (three parameters).
    """
    n = _as_positive_array("concurrency", concurrency)
    x = _as_positive_array("throughput", throughput)
    if n.size != x.size:
        raise InputError("throughput", len(x), f"as many values as concurrency ({n.size})")
    if n.size < 3:
        raise InputError("concurrency", n.size, "at least 3 points")
    if np.unique(n).size < 3:
        raise InputError("concurrency", sorted(set(n.tolist())), "at least 3 distinct values")

    per_unit = x / n
    lam_small = float(per_unit[n == n.min()].max())
    lam_max = float(per_unit.max())
    starts = [_linearised_start(n, x, lam) for lam in {lam_small, lam_max}]
    starts += [np.array([s, k, lam_small]) for s, k in ((0.0, 0.0), (0.05, 1e-4), (0.3, 1e-2))]

    lower = np.array([0.0, 0.0, np.finfo(float).tiny])
    upper = np.array([1.0, np.inf, np.inf])
    best = None
    for x0 in starts:
        res = least_squares(
            _residuals,
            x0,
            jac=_jacobian,
            bounds=(lower, upper),
            args=(n, x),
            x_scale="jac",
            ftol=1e-14,
            xtol=1e-14,
            gtol=1e-14,
            max_nfev=20_000,
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None  # starts is never empty
    params = _snap_to_bounds(best.x, n, x)
    sigma, kappa, lam = (float(v) for v in params)

    resid = x - usl_throughput(n, sigma, kappa, lam)  # observed - fitted, like R
    rss = float(np.dot(resid, resid))
    dof = n.size - 3
    ses = [math.nan] * 3
    if dof > 0:
        jac = _jacobian(best.x, n, x)
        try:
            cov = (rss / dof) * np.linalg.inv(jac.T @ jac)
            ses = [math.sqrt(v) if v >= 0 else math.nan for v in np.diag(cov)]
        except np.linalg.LinAlgError:
            pass  # unidentifiable direction: leave the standard errors undefined
    tss = float(np.sum((x - x.mean()) ** 2))
    r2 = 1.0 - rss / tss if tss > 0 else math.nan

    amdahl = lam / sigma if sigma > 0 else math.inf
    if kappa > 0:
        # the peak over n >= 1: at sqrt((1 - σ)/κ), or at 1 when that is below 1 (σ near 1,
        # where the formula gives 0 and the throughput there is 0/0)
        n_peak = max(1.0, math.sqrt(max(0.0, 1.0 - sigma) / kappa))
        x_peak = float(usl_throughput(n_peak, sigma, kappa, lam))
        candidates = {max(1, math.floor(n_peak)), max(1, math.ceil(n_peak))}
        n_peak_int = max(
            sorted(candidates), key=lambda c: float(usl_throughput(c, sigma, kappa, lam))
        )
        x_peak_int: float | None = float(usl_throughput(n_peak_int, sigma, kappa, lam))
        peak_int: int | None = int(n_peak_int)
    else:
        # monotone: the "peak" is the asymptote at infinite concurrency
        n_peak, x_peak, peak_int, x_peak_int = math.inf, amdahl, None, None

    return UslFit(
        sigma=sigma,
        kappa=kappa,
        lambda_=lam,
        sigma_se=ses[0],
        kappa_se=ses[1],
        lambda_se=ses[2],
        n_peak=n_peak,
        n_peak_int=peak_int,
        x_peak=x_peak,
        x_peak_int=x_peak_int,
        amdahl_limit=amdahl,
        r2=r2,
        rmse=math.sqrt(rss / n.size),
        n_points=int(n.size),
        residuals=tuple(float(r) for r in resid),
    )


# --------------------------------------------------------------------------- CSV input


def read_usl_csv(path: str | PathLike[str]) -> tuple[list[float], list[float]]:
    """Read ``concurrency`` and ``throughput`` columns from a CSV file with a header row.

    Column order is free, other columns are ignored, header names are matched after stripping
    blanks and case-folding, and blank lines are skipped. Bad content raises ``InputError``
    whose source is ``"<path>, line <n>"`` and whose field is the column name. I/O errors
    (missing file, permissions) propagate unchanged.
    """
    src = str(path)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        where = f"{src}, line {reader.line_num or 1}"
        if header is None:
            raise InputError("header", "", "a header row naming concurrency,throughput", source=src)
        names = [h.strip().casefold() for h in header]
        index: dict[str, int] = {}
        for col in _FIELDS:
            hits = [i for i, h in enumerate(names) if h == col]
            if len(hits) != 1:
                expected = f"exactly one column named '{col}'"
                raise InputError("header", header, expected, source=where)
            index[col] = hits[0]

        columns: dict[str, list[float]] = {col: [] for col in _FIELDS}
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            where = f"{src}, line {reader.line_num}"
            for col in _FIELDS:
                i = index[col]
                cell = row[i].strip() if i < len(row) else ""
                try:
                    value = float(cell)
                except ValueError:
                    raise InputError(col, cell, "a number", source=where) from None
                if not math.isfinite(value) or value <= 0.0:
                    raise InputError(col, cell, "a finite number > 0", source=where)
                columns[col].append(value)
    return columns["concurrency"], columns["throughput"]
