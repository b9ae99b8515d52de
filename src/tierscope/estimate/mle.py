"""Response-time-based maximum likelihood (MLE).

Only throughputs and response times are used — no utilisations: the model utilisation of
station k in window w is U_wk = sum_c X_wc D_kc / m_k, and a class-c request's mean response
time is R_wc = sum_k D_kc F_k(U_wk) (open processor sharing: F = 1/(1-U), the M/M/m-PS factor
for m servers). Response times are taken as exponential around that mean, so a window whose
n_wc = X_wc dt_w requests averaged r_wc contributes n_wc (log R_wc + r_wc / R_wc) to the negative
log-likelihood (the sufficient statistic of n exponential samples). The optimum is searched in
log D from several starts (the UBO solution when utilisations exist, and a Latin hypercube),
with L-BFGS-B; bootstrap replicates start from the point estimate.

Identifiability: the load dependence of R is what separates the demands, so the windows must
span different loads. With only end-to-end response times, two stations that a class visits
enter R symmetrically and can exchange their demands; the fit notes this.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.optimize import minimize
from scipy.stats import qmc

from tierscope.errors import InputError
from tierscope.estimate._data import Observations
from tierscope.estimate._queueing import U_MAX, ps_factor
from tierscope.estimate.base import Estimator


class MLE(Estimator):
    """Maximum likelihood of the measured response times under open PS stations."""

    name = "mle"
    needs: ClassVar[tuple[str, ...]] = ("response_time",)
    summary = "response-time maximum likelihood (open processor-sharing model, no utilisations)"
    default_boot = 100

    def __init__(
        self,
        *,
        starts: int = 8,
        n_boot: int | None = None,
        confidence: float = 0.95,
        seed: int = 1,
    ) -> None:
        super().__init__(n_boot=n_boot, confidence=confidence, seed=seed)
        self.starts = starts

    def fit(self, data: Observations):  # type: ignore[override]
        if isinstance(self.starts, bool) or not isinstance(self.starts, int) or self.starts < 1:
            raise InputError("starts", self.starts, "an integer >= 1")
        self._warm: np.ndarray | None = None
        super().fit(data)
        if len(data.stations) > 1:
            self.notes_.append(
                "only end-to-end response times: stations a class visits can exchange demand"
            )
        return self

    def _bootstrap(self, data: Observations) -> None:
        self._warm = np.log(np.maximum(self.demands_, 1e-12))
        super()._bootstrap(data)

    def _estimate(self, data: Observations) -> np.ndarray:
        assert data.response_time is not None
        X, R = data.throughput, data.response_time
        K, C = len(data.stations), len(data.classes)
        m = data.servers
        ok = np.isfinite(R) & (X > 0)
        if ok.sum() < K * C:
            raise InputError(
                "rows",
                int(ok.sum()),
                f"at least {K * C} windows with response times for {K * C} demands",
                source=data.source,
            )
        n = np.where(ok, X * data.weights[:, None], 0.0)
        n = n / n[ok].mean()
        r = np.where(ok, R, 0.0)
        r_scale = float(np.mean(R[ok]))

        def nll(theta: np.ndarray) -> float:
            D = np.exp(theta).reshape(K, C) * r_scale
            U = X @ D.T / m[None, :]  # [W, K]
            over = np.maximum(U - U_MAX, 0.0).sum()
            Rm = ps_factor(U, m[None, :]) @ D  # [W, C]
            Rm = np.where(ok, Rm / r_scale, 1.0)
            return float(np.sum(n * (np.log(Rm) + r / r_scale / Rm)) + 1e6 * over)

        starts = self._starts(data, K, C, r_scale)
        best = None
        for x0 in starts:
            res = minimize(nll, x0, method="L-BFGS-B", bounds=[(-25, 3)] * (K * C))
            if best is None or res.fun < best.fun:
                best = res
        assert best is not None
        return np.exp(best.x).reshape(K, C) * r_scale

    def _starts(self, data: Observations, K: int, C: int, r_scale: float) -> list[np.ndarray]:
        if self._warm is not None:
            return [self._warm.ravel() - np.log(r_scale)]
        out = []
        if data.utilization is not None:
            from tierscope.estimate.ubo import UBO

            d0 = UBO(n_boot=0).fit(data).demands_
            out.append(np.log(np.maximum(d0, 1e-6 * r_scale) / r_scale).ravel())
        lhs = qmc.LatinHypercube(d=K * C, seed=self.seed).random(self.starts)
        # log(D / mean R) between about 1e-4 and 1: light to heavy demands
        out += list(np.log(1e-4) + lhs * (-np.log(1e-4)))
        return out


__all__ = ["MLE"]
