"""Utilisation-based regression (UBR): the utilisation law fitted by non-negative least squares.

For every station k and window w, busy servers B_wk = U_wk m_k = sum_c X_wc D_kc (+ U0_k, the
background load, when ``background=True``); each station is an independent NNLS problem over
the windows, weighted by the window lengths. Exact on noise-free data (up to rounding) as soon as
the throughput matrix has full column rank; when the class mix hardly changes across windows the
columns are collinear and the split between classes is not identifiable — the fit then says so
in its notes (condition number) instead of returning arbitrary numbers silently.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.optimize import nnls

from tierscope.errors import InputError
from tierscope.estimate._data import Observations
from tierscope.estimate.base import Estimator

#: Condition number of the scaled throughput matrix above which the class split is unreliable.
COLLINEAR_CONDITION = 1e3


class UBR(Estimator):
    """Utilisation law B = X D (+ U0) by non-negative least squares, per station."""

    name = "ubr"
    needs: ClassVar[tuple[str, ...]] = ("utilization",)
    summary = "utilisation-based regression (non-negative least squares of the utilisation law)"

    def __init__(
        self,
        *,
        background: bool = False,
        n_boot: int | None = None,
        confidence: float = 0.95,
        seed: int = 1,
    ) -> None:
        super().__init__(n_boot=n_boot, confidence=confidence, seed=seed)
        self.background = background

    def fit(self, data: Observations):  # type: ignore[override]
        super().fit(data)
        self.background_ = self._solve(data)[1]
        cond = throughput_condition(data.throughput)
        self.condition_ = cond
        if cond > COLLINEAR_CONDITION:
            self.notes_.append(
                f"class throughputs are nearly collinear across windows (condition {cond:.3g}): "
                "the split of demand between classes is poorly identified"
            )
        return self

    def _estimate(self, data: Observations) -> np.ndarray:
        return self._solve(data)[0]

    def _solve(self, data: Observations) -> tuple[np.ndarray, np.ndarray]:
        """Demands [K, C] and background busy servers [K]."""
        X = data.throughput
        B = data.busy
        sw = np.sqrt(data.weights)
        A = X if not self.background else np.column_stack([X, np.ones(len(X))])
        if A.shape[0] < A.shape[1]:
            raise InputError(
                "rows",
                A.shape[0],
                f"at least {A.shape[1]} observation windows for {A.shape[1]} unknowns",
                source=data.source,
            )
        scale = np.maximum(np.abs(A).max(axis=0), 1e-300)  # columns of comparable size
        As = A * sw[:, None] / scale[None, :]
        D = np.zeros((len(data.stations), len(data.classes)))
        background = np.zeros(len(data.stations))
        for k in range(len(data.stations)):
            sol, _ = nnls(As, B[:, k] * sw, maxiter=50 * As.shape[1])
            sol = sol / scale
            D[k] = sol[: len(data.classes)]
            if self.background:
                background[k] = sol[-1]
        return D, background


def throughput_condition(X: np.ndarray) -> float:
    """Condition number of the column-scaled throughput matrix (inf if a class never runs)."""
    norms = np.linalg.norm(X, axis=0)
    if np.any(norms == 0):
        return float("inf")
    s = np.linalg.svd(X / norms[None, :], compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")


__all__ = ["UBR", "throughput_condition"]
