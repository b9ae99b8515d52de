"""Service-level objectives and Malkowski's SLA/profit model (seed 001 §2.3).

An SLO is a bound on a statistic of the response time: ``p95<0.5``, ``mean<=0.2``,
``p99<1`` (several separated by commas must all hold). The profit model (CloudXplor) earns, for
each request, the value of the response-time band it falls in — full value up to the first
edge, less in later bands, a penalty beyond the last — and pays for the configuration's
resources by the hour: profit = requests/h x mean value per request - cost/h.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tierscope.domains.ntier import Prediction
from tierscope.errors import InputError
from tierscope.spec.prices import Prices

_SLO = re.compile(r"^\s*(mean|p\d{1,2}(?:\.\d+)?)\s*(<=|<)\s*([0-9.eE+-]+)\s*(ms|s)?\s*$")


@dataclass(frozen=True)
class Objective:
    """One bound: ``statistic`` (``mean`` or ``pNN``) of the response time below ``threshold`` s."""

    statistic: str
    threshold: float
    inclusive: bool

    @property
    def quantile(self) -> float | None:
        return None if self.statistic == "mean" else float(self.statistic[1:]) / 100

    def value(self, p: Prediction) -> float | None:
        """The prediction's value of this statistic."""
        if self.quantile is None:
            return p.rt_mean
        return p.rt_quantile(self.quantile)

    def met(self, p: Prediction, margin: float = 0.0) -> bool:
        """Whether ``p`` meets the bound with ``margin`` (a fraction of it) to spare."""
        v = self.value(p)
        if v is None:
            raise InputError(
                "--slo",
                str(self),
                "a mean-response-time SLO (percentiles need the simulation: --solver quota-sim)",
            )
        bound = self.threshold * (1 - margin)
        return v <= bound if self.inclusive else v < bound

    def __str__(self) -> str:
        return f"{self.statistic}{'<=' if self.inclusive else '<'}{self.threshold:g}"


def parse_slo(text: str) -> list[Objective]:
    """``"p95<0.5"``, ``"mean<=200ms, p99<1"`` -> objectives (thresholds in seconds)."""
    out = []
    for part in text.split(","):
        m = _SLO.match(part)
        if not m:
            raise InputError(
                "--slo",
                part.strip(),
                "STAT<VALUE with STAT mean or pNN, e.g. p95<0.5 or mean<200ms",
            )
        stat, op, raw, unit = m.groups()
        try:
            value = float(raw)
        except ValueError:
            raise InputError("--slo", part.strip(), "a number after the comparison") from None
        if unit == "ms":
            value /= 1000
        if not (value > 0 and np.isfinite(value)):
            raise InputError("--slo", part.strip(), "a threshold > 0")
        if stat != "mean" and not 0 < float(stat[1:]) < 100:
            raise InputError("--slo", part.strip(), "a percentile between p1 and p99.9")
        out.append(Objective(stat, value, op == "<="))
    return out


def slo_met(objectives: list[Objective], p: Prediction, margin: float = 0.0) -> bool:
    return all(o.met(p, margin) for o in objectives)


def revenue_per_request(prices: Prices, threshold: float, response_times: np.ndarray) -> float:
    """Mean SLA value of the requests with these response times (seed 001 Eq. 22)."""
    bands, beyond = prices.bands(threshold)
    rts = np.asarray(response_times, dtype=float)
    if rts.size == 0:
        return 0.0
    edges = np.array([e for e, _ in bands])
    values = np.array([v for _, v in bands] + [beyond])
    idx = np.searchsorted(edges, rts, side="left")  # rt <= edge -> that band
    return float(values[idx].mean())


def revenue_per_hour(prices: Prices, threshold: float, p: Prediction) -> float:
    """Requests per hour times their mean SLA value (the mean response time stands for all
    requests when the solver gave no distribution)."""
    rts = p.response_times if p.response_times is not None else np.array([p.rt_mean])
    return p.throughput * 3600.0 * revenue_per_request(prices, threshold, rts)


def cost_per_hour(prices: Prices, replicas: dict[str, int], cpu: dict[str, float | None]) -> float:
    total = 0.0
    for tier, n in replicas.items():
        price = prices.tier_price(tier)
        cores = cpu.get(tier)
        total += n * (price.node_per_hour + price.core_per_hour * (cores if cores else 1.0))
    return total


def describe_bands(prices: Prices, threshold: float) -> dict[str, Any]:
    bands, beyond = prices.bands(threshold)
    return {
        "currency": prices.currency,
        "bands": [{"up_to": e, "per_request": v} for e, v in bands],
        "beyond": beyond,
    }


__all__ = [
    "Objective",
    "cost_per_hour",
    "describe_bands",
    "parse_slo",
    "revenue_per_hour",
    "revenue_per_request",
    "slo_met",
]
