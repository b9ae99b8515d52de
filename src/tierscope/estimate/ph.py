"""Phase-type distributions fitted to measured times: hyper-Erlang by expectation–maximisation
(G-FIT, Thümmler, Buchholz & Telek 2006), with a Gamma fit reported beside it.

Wu (seed 002 §1.1, §2.10) fits the brokers' service times and the end-to-end latencies with
HyperStar2, which no registry carries; a hyper-Erlang distribution (a mixture of Erlang branches)
is what it fits, and EM finds one for every split of the ``phases`` into branches: for fixed
branch orders r_j, the E step weighs each sample by the posterior of each branch, the M step
sets p_j to the mean weight and the rate to r_j times the weighted count over the weighted sum
of the samples. Each split runs on the samples aggregated into (up to) 400 quantile bins, as
G-FIT does, so that trying every split of 10 phases into up to 4 branches takes a fraction of a
second; the best few splits are then refined on every sample, and the one of highest
log-likelihood is kept. The result's CDF is a mixture of regularised incomplete gamma
functions, so the Kolmogorov–Smirnov distance to the samples is exact and cheap.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from itertools import pairwise, permutations
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import gammainc, gammaln, logsumexp

from tierscope.errors import InputError
from tierscope.qn.phase_type import PhaseType

__all__ = ["HyperErlangFit", "fit_hyper_erlang", "read_samples"]

_BINS = 400
_REFINE = 3


@dataclass(frozen=True)
class HyperErlangFit:
    """A fitted hyper-Erlang: branches of (probability, phases, rate per phase)."""

    branches: list[tuple[float, int, float]]
    log_likelihood: float
    ks: float
    samples: int
    data_mean: float
    data_scv: float
    gamma: dict[str, float] = field(default_factory=dict)

    @property
    def ph(self) -> PhaseType:
        return PhaseType.hyper_erlang(self.branches)

    def cdf(self, x: np.ndarray) -> np.ndarray:
        return _mixture_cdf(self.branches, np.asarray(x, dtype=float))

    def to_dict(self) -> dict[str, Any]:
        ph = self.ph
        return ph.to_dict() | {
            "mean": ph.mean,
            "scv": ph.scv,
            "log_likelihood": self.log_likelihood,
            "ks": self.ks,
            "phases": ph.phases,
            "branches": [{"p": p, "phases": k, "rate": r} for p, k, r in self.branches],
            "samples": self.samples,
            "data": {"mean": self.data_mean, "scv": self.data_scv},
            "gamma": self.gamma,
        }


def _log_erlang(x: np.ndarray, k: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """log pdf of Erlang(k, rate) at x (shape (n,)), for each branch: (n, branches)."""
    lx = np.log(x)[:, None]
    return k * np.log(rate) + (k - 1) * lx - rate * x[:, None] - gammaln(k)


def _em(
    x: np.ndarray, w: np.ndarray, k: np.ndarray, p: np.ndarray, rate: np.ndarray, iters: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """EM on weighted samples with fixed orders ``k``; returns (p, rate, log-likelihood)."""
    total = w.sum()
    ll_old = -math.inf
    ll = -math.inf
    for _ in range(iters):
        logs = _log_erlang(x, k, rate) + np.log(np.maximum(p, 1e-300))
        norm = logsumexp(logs, axis=1)
        ll = float(w @ norm)
        q = np.exp(logs - norm[:, None]) * w[:, None]  # posterior weights
        mass = q.sum(axis=0)
        p = mass / total
        rate = k * mass / np.maximum(q.T @ x, 1e-300)
        if ll - ll_old <= 1e-9 * abs(ll):
            break
        ll_old = ll
    return p, rate, ll


def _splits(phases: int, most: int) -> list[tuple[int, ...]]:
    """Ordered splits of ``phases`` into 1..``most`` branch orders (distinct orderings)."""
    out: set[tuple[int, ...]] = set()

    def parts(n: int, largest: int, acc: tuple[int, ...]) -> None:
        if n == 0:
            out.update(permutations(acc))
            return
        if len(acc) == most:
            return
        for k in range(min(n, largest), 0, -1):
            parts(n - k, k, (*acc, k))

    parts(phases, phases, ())
    return sorted(out)


def _mixture_cdf(branches: list[tuple[float, int, float]], x: np.ndarray) -> np.ndarray:
    return sum(p * gammainc(k, rate * np.maximum(x, 0.0)) for p, k, rate in branches)


def fit_hyper_erlang(
    samples: np.ndarray, phases: int, *, branches: int = 4, iters: int = 500
) -> HyperErlangFit:
    """The hyper-Erlang of ``phases`` phases (in up to ``branches`` branches) of highest
    likelihood for ``samples`` (positive times), with a Gamma fit (MLE) beside it."""
    x = np.asarray(samples, dtype=float).reshape(-1)
    x = x[np.isfinite(x)]
    if x.size < 10:
        raise InputError("samples", int(x.size), "at least 10 finite positive times")
    if np.any(x <= 0):
        raise InputError("samples", float(x.min()), "positive times (PH has no mass at 0)")
    if not 1 <= phases <= 64:
        raise InputError("--phases", phases, "an integer from 1 to 64")
    branches = max(1, min(branches, phases))
    xs = np.sort(x)
    # G-FIT's aggregation: quantile bins, each represented by its mean, weighted by its count
    edges = np.linspace(0, xs.size, min(_BINS, xs.size) + 1).astype(int)
    xb = np.array([xs[a:b].mean() for a, b in pairwise(edges) if b > a])
    wb = np.diff(edges)[np.diff(edges) > 0].astype(float)
    tried = []
    for split in _splits(phases, branches):
        k = np.array(split, dtype=float)
        # start: branch j on the j-th equal share of the sorted samples, at its mean
        cut = np.linspace(0, xs.size, k.size + 1).astype(int)
        means = np.array([xs[a:b].mean() for a, b in pairwise(cut)])
        p0 = np.full(k.size, 1.0 / k.size)
        p, rate, ll = _em(xb, wb, k, p0, k / means, iters)
        tried.append((ll, split, p, rate))
    tried.sort(key=lambda t: -t[0])
    best = None
    for _, split, p, rate in tried[:_REFINE]:
        k = np.array(split, dtype=float)
        p, rate, ll = _em(x, np.ones(x.size), k, p, rate, iters)
        if best is None or ll > best[0]:
            best = (ll, split, p, rate)
    assert best is not None
    ll, split, p, rate = best
    kept = [(float(pj), int(kj), float(rj)) for pj, kj, rj in zip(p, split, rate, strict=True)
            if pj > 1e-12]  # fmt: skip
    total = sum(b[0] for b in kept)
    kept = [(pj / total, kj, rj) for pj, kj, rj in kept]
    ecdf = np.arange(1, xs.size + 1) / xs.size
    fitted = _mixture_cdf(kept, xs)
    ks = float(max(np.max(ecdf - fitted), np.max(fitted - (ecdf - 1.0 / xs.size))))
    a, _, scale = stats.gamma.fit(x, floc=0.0)
    g_cdf = stats.gamma.cdf(xs, a, scale=scale)
    g_ks = float(max(np.max(ecdf - g_cdf), np.max(g_cdf - (ecdf - 1.0 / xs.size))))
    gamma = {
        "shape": float(a),
        "scale": float(scale),
        "mean": float(a * scale),
        "scv": float(1.0 / a),
        "log_likelihood": float(stats.gamma.logpdf(x, a, scale=scale).sum()),
        "ks": g_ks,
    }
    mean = float(x.mean())
    return HyperErlangFit(
        branches=kept,
        log_likelihood=float(ll),
        ks=ks,
        samples=int(x.size),
        data_mean=mean,
        data_scv=float(x.var() / (mean * mean)),
        gamma=gamma,
    )


def read_samples(path: str | Path, column: str | None = None) -> np.ndarray:
    """Times from a CSV file: one number per row, or the column ``column`` (by header name)
    of a file with a header; blank lines are skipped."""
    p = Path(path)
    try:
        rows = [r for r in csv.reader(p.read_text().splitlines()) if any(c.strip() for c in r)]
    except FileNotFoundError:
        raise InputError("SAMPLES", str(p), "an existing CSV file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(p), type(exc).__name__, "a readable text CSV file") from None
    if not rows:
        raise InputError(str(p), "empty", "one sample per row")

    def number(cell: str) -> float | None:
        try:
            return float(cell)
        except ValueError:
            return None

    header = None if all(number(c) is not None for c in rows[0]) else [c.strip() for c in rows[0]]
    body = rows[1:] if header is not None else rows
    if column is not None:
        if header is None or column not in header:
            raise InputError("--column", column, f"a column of {p} ({', '.join(header or [])})")
        j = header.index(column)
    elif len(rows[0]) == 1:
        j = 0
    else:
        raise InputError("--column", None, f"the column of {p} to fit ({', '.join(header or [])})")
    out = []
    for i, row in enumerate(body, start=2 if header is not None else 1):
        v = number(row[j]) if j < len(row) else None
        if v is None or not math.isfinite(v):
            raise InputError(f"{p}: line {i}", row[j] if j < len(row) else "", "a number")
        out.append(v)
    return np.asarray(out)
