"""Utilisation-based optimisation (UBO, Liu, Wynter, Xia and Zhang 2006).

One quadratic program over all windows: the utilisation law B_wk = sum_c X_wc D_kc and, where
response times were measured, the open processor-sharing response-time law
r_wc = sum_k D_kc F_k(U_wk) with the *measured* utilisations (F = 1/(1-U) for one server,
the M/M/m-PS factor otherwise), subject to D >= 0. Both residual groups are scaled by their mean
size so that seconds and busy servers weigh alike. Because the response-time rows add
information that does not depend on the class mix, UBO separates classes where UBR cannot (the
collinear case), as long as the stations' utilisations vary.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.optimize import lsq_linear

from tierscope.estimate._data import Observations
from tierscope.estimate._queueing import ps_factor
from tierscope.estimate.base import Estimator


class UBO(Estimator):
    """Liu et al.'s joint least squares of the utilisation and response-time laws, D >= 0."""

    name = "ubo"
    needs: ClassVar[tuple[str, ...]] = ("utilization",)
    summary = "utilisation-based optimisation (utilisation and response-time laws, one QP)"

    def _estimate(self, data: Observations) -> np.ndarray:
        X, B, U = data.throughput, data.busy, data.utilization
        assert U is not None
        W, C = X.shape
        K = len(data.stations)
        sw = np.sqrt(data.weights)
        rows, rhs = [], []
        # Unknowns ordered D[k, c] -> k * C + c.
        scale_u = max(float(np.mean(np.abs(B))), 1e-12)
        for k in range(K):
            A = np.zeros((W, K * C))
            A[:, k * C : (k + 1) * C] = X
            rows.append(A * sw[:, None] / scale_u)
            rhs.append(B[:, k] * sw / scale_u)
        if data.response_time is not None:
            F = ps_factor(U, data.servers[None, :])  # [W, K]
            for c in range(C):
                r = data.response_time[:, c]
                ok = np.isfinite(r)
                if not ok.any():
                    continue
                scale_r = max(float(np.mean(r[ok])), 1e-12)
                A = np.zeros((int(ok.sum()), K * C))
                for k in range(K):
                    A[:, k * C + c] = F[ok, k]
                rows.append(A * sw[ok, None] / scale_r)
                rhs.append(r[ok] * sw[ok] / scale_r)
        A = np.vstack(rows)
        b = np.concatenate(rhs)
        col = np.maximum(np.abs(A).max(axis=0), 1e-300)
        sol = lsq_linear(A / col, b, bounds=(0, np.inf), method="bvls", tol=1e-12)
        return (sol.x / col).reshape(K, C)


__all__ = ["UBO"]
