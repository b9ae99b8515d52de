"""Elastic control: controllers as plug-ins, evaluated against workload traces on the twin.

``control_twin(model, trace, controller, ...)`` runs one controller over a trace on the
quota-aware twin of a calibrated model (:mod:`tierscope.plan.control.evaluate`); the controllers
are in :mod:`tierscope.plan.control.policies`.
"""

from __future__ import annotations

from tierscope.plan.control.evaluate import ControlResult, control_twin, model_meets, twin_of
from tierscope.plan.control.policies import (
    IAE,
    POLICIES,
    Bounds,
    Controller,
    ModelPolicy,
    Observation,
    OperationalDataStore,
    Static,
    Threshold,
    cheapest,
)

__all__ = [
    "IAE",
    "POLICIES",
    "Bounds",
    "ControlResult",
    "Controller",
    "ModelPolicy",
    "Observation",
    "OperationalDataStore",
    "Static",
    "Threshold",
    "cheapest",
    "control_twin",
    "model_meets",
    "twin_of",
]
