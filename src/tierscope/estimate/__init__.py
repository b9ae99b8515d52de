"""Service-demand estimation from measurements.

``ESTIMATORS[name](**params).fit(observations)`` runs one method; :func:`estimate` also resolves
``auto`` (the method the data supports best, with the reason). Observations come from the
observation CSV (:meth:`Observations.from_table`), a run folder (:func:`observations_from_run`)
or a simulation. Every method returns demands in seconds of one server per request (CPU seconds
for a run folder) with bootstrap intervals.
"""

from __future__ import annotations

from typing import Any

from tierscope.errors import InputError
from tierscope.estimate._data import Observations, RequestRecords
from tierscope.estimate._run import observations_from_run
from tierscope.estimate.base import Estimator
from tierscope.estimate.ci import CI
from tierscope.estimate.mle import MLE
from tierscope.estimate.sd import SD
from tierscope.estimate.ubo import UBO
from tierscope.estimate.ubr import COLLINEAR_CONDITION, UBR, throughput_condition

ESTIMATORS: dict[str, type[Estimator]] = {
    "ubr": UBR,
    "ubo": UBO,
    "ci": CI,
    "mle": MLE,
    "sd": SD,
}
METHOD_NAMES = ("auto", *ESTIMATORS)


def choose_method(data: Observations) -> tuple[str, str]:
    """The method ``auto`` uses for ``data``, and why."""
    have = set(data.available())
    if "records" in have:
        return "ci", "per-request records are available: complete information uses every request"
    if "utilization" in have:
        cond = throughput_condition(data.throughput)
        if cond <= COLLINEAR_CONDITION:
            return "ubr", (
                f"utilisations measured and the class mix varies (condition {cond:.3g}): "
                "the utilisation law identifies every demand"
            )
        if "response_time" in have:
            return "ubo", (
                f"class throughputs are collinear (condition {cond:.3g}): the response-time law "
                "separates the classes"
            )
        return "ubr", f"only utilisations, and collinear class throughputs (condition {cond:.3g})"
    if "response_time" in have:
        return "mle", "no utilisations: response times and throughputs only"
    if "queue" in have and "population" in have:
        return "sd", "queue-length samples of a closed system only"
    raise InputError(
        "INPUT",
        data.source,
        "utilisations (u_<station>), response times (r_<class>), queue-length samples "
        "(n_<station>_<class>) with populations (pop_<class>), or per-request records",
    )


def estimate(data: Observations, method: str = "auto", **params: Any) -> Estimator:
    """Fit ``method`` (or the ``auto`` choice, named in the notes) to ``data``."""
    if method not in METHOD_NAMES:
        raise InputError("--method", method, "one of " + ", ".join(METHOD_NAMES))
    why = None
    if method == "auto":
        method, why = choose_method(data)
    est = ESTIMATORS[method](**params).fit(data)
    if why is not None:
        est.notes_.insert(0, f"auto chose '{method}': {why}")
    return est


__all__ = [
    "CI",
    "ESTIMATORS",
    "METHOD_NAMES",
    "MLE",
    "SD",
    "UBO",
    "UBR",
    "Estimator",
    "Observations",
    "RequestRecords",
    "choose_method",
    "estimate",
    "observations_from_run",
]
