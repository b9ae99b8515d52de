"""Output analysis of a simulation: warm-up removal and confidence intervals.

Design decision: every estimate is a ratio of two sums over time windows (completions over time,
response-time sum over completions, queue-length area over time). Warm-up is removed by MSER-5
on the windowed series, then the remaining windows are grouped into batches whose ratio
estimates give batch-means confidence intervals (Student t). With several replications the
replication means are used instead (independent by construction).
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps


def mser5(series: np.ndarray) -> int:
    """Warm-up length (in observations) chosen by MSER-5 (White, 1997).

    The series is cut into batches of 5; the truncation point d minimises the marginal standard
    error sum((y_i - mean)^2) / (n - d)^2 over the batch means y, searched over the first half.
    """
    x = np.asarray(series, dtype=float)
    n = x.size // 5
    if n < 4:
        return 0
    y = x[: n * 5].reshape(n, 5).mean(axis=1)
    # suffix sums give every candidate's variance in O(n)
    s1 = np.cumsum(y[::-1])[::-1]
    s2 = np.cumsum((y**2)[::-1])[::-1]
    k = np.arange(n, 0, -1, dtype=float)  # number of batches kept for d = 0..n-1
    sse = s2 - s1**2 / k
    score = sse / k**2
    half = max(1, n // 2)
    d = int(np.argmin(score[:half]))
    return d * 5


def ratio_ci(
    num: np.ndarray, den: np.ndarray, *, batches: int = 30, confidence: float = 0.99
) -> tuple[float, float]:
    """Ratio estimate sum(num)/sum(den) and its batch-means half-width.

    ``num`` and ``den`` are per-window sums; the leading axis is time, other axes are broadcast
    (estimates for many quantities at once). Returns (estimate, half_width) arrays; the
    half-width is inf when fewer than 4 usable batches exist.
    """
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    n = num.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        est = num.sum(axis=0) / den.sum(axis=0)
    b = min(batches, n)
    if b < 4:
        return est, np.full_like(est, np.inf)
    size = n // b
    nb = num[: size * b].reshape(b, size, *num.shape[1:]).sum(axis=1)
    db = den[: size * b].reshape(b, size, *den.shape[1:]).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = nb / db
    return est, _half_width(y, confidence)


def replication_ci(values: np.ndarray, confidence: float = 0.99) -> tuple[float, float]:
    """Mean over replications (leading axis) and its Student-t half-width."""
    v = np.asarray(values, dtype=float)
    if v.shape[0] < 2:
        return v.mean(axis=0), np.full(v.shape[1:], np.inf)
    return v.mean(axis=0), _half_width(v, confidence)


def _half_width(y: np.ndarray, confidence: float) -> np.ndarray:
    """t-based half-width of the mean of the rows of y, ignoring NaN rows per column."""
    ok = np.isfinite(y)
    k = ok.sum(axis=0)
    yz = np.where(ok, y, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = yz.sum(axis=0) / k
        var = (np.where(ok, (y - mean) ** 2, 0.0)).sum(axis=0) / (k - 1)
        t = sps.t.ppf(0.5 + confidence / 2, np.maximum(k - 1, 1))
        hw = t * np.sqrt(var / k)
    return np.where(k >= 2, hw, np.inf)
