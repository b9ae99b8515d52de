"""Short-term workload forecasts for the controllers (seed 001 §2.4, IAE's Workload Forecast
Model): the main seasonal components of the history, extrapolated.

The thesis leaves the horizon, the number of harmonics and the significance test open (it
defers to Hedwig et al.). Here the history is fitted by least squares with a line plus up to
``harmonics`` sinusoids, each period chosen in turn as the one (among whole numbers of steps
from 4 to the history's length, the discrete Fourier periods and those between them) that
lowers the residual most; a sinusoid is kept only if it removes at least ``significance`` of
the variance left. Fitting the period rather than taking the FFT's bins avoids the leakage of a
season that is not a whole fraction of the window. The fit is evaluated ``horizon`` seconds
past the last point. With fewer than ``min_points`` points the last step's trend is
extrapolated.
"""

from __future__ import annotations

import numpy as np


def _design(t: np.ndarray, periods: list[float]) -> np.ndarray:
    cols = [np.ones_like(t), t]
    for p in periods:
        cols += [np.cos(2 * np.pi * t / p), np.sin(2 * np.pi * t / p)]
    return np.column_stack(cols)


def _residual(t: np.ndarray, y: np.ndarray, periods: list[float]) -> tuple[float, np.ndarray]:
    coef, *_ = np.linalg.lstsq(_design(t, periods), y, rcond=None)
    r = y - _design(t, periods) @ coef
    return float(r @ r), coef


def fourier_forecast(
    history: np.ndarray,
    step: float,
    horizon: float,
    *,
    harmonics: int = 2,
    significance: float = 0.5,
    min_points: int = 8,
    max_points: int = 240,
) -> float:
    """The load ``horizon`` seconds after the last of ``history`` (sampled every ``step`` s)."""
    y = np.asarray(history, dtype=float)[-max_points:]
    if y.size == 0:
        return 0.0
    if y.size < min_points:
        slope = (y[-1] - y[-2]) / step if y.size > 1 else 0.0
        return float(max(y[-1] + slope * horizon, 0.0))
    n = y.size
    t = np.arange(n, dtype=float)
    periods: list[float] = []
    best, coef = _residual(t, y, periods)
    candidates = np.unique(np.concatenate([np.arange(4.0, n + 1), n / np.arange(1, n // 4 + 1)]))
    for _ in range(harmonics):
        trials = [(_residual(t, y, [*periods, p])[0], p) for p in candidates if p not in periods]
        if not trials:
            break
        res, p = min(trials)
        if best <= 0 or res > (1 - significance) * best:
            break
        periods.append(float(p))
        best, coef = _residual(t, y, periods)
    ahead = np.array([n - 1 + horizon / step])
    return float(max((_design(ahead, periods) @ coef)[0], 0.0))


__all__ = ["fourier_forecast"]
